"""Declares the C extension; the project's metadata lives in pyproject.toml.

Environment switches (the msgspec habit):
  PYWHEEL_SANITIZE=address,undefined   build with those sanitizers (gcc/clang)
  PYWHEEL_DEBUG=1                      -O0 -g, assertions kept

Flags by compiler: gcc and clang (Linux, macOS, MinGW) get C11 and warnings;
MSVC gets C11 with its C11 atomics (stdatomic.h: Visual Studio 2022 17.5+,
still behind /experimental:c11atomics), none of the GCC spellings.  On
Windows the core uses Win32 threads, so nothing links pthreads; for CPython
3.11 and 3.12 the core's clock is GetTickCount64, what time.monotonic()
reads there (QueryPerformanceCounter from 3.13; csrc/core/platform.h).
"""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = bool(os.environ.get("PYWHEEL_DEBUG"))
SANITIZE = os.environ.get("PYWHEEL_SANITIZE")
WINDOWS = sys.platform == "win32"


def gcc_flags():
    cflags = ["-std=c11", "-Wall", "-Wextra"]
    if not WINDOWS:  # a PE DLL exports only what is declared so (PyInit__core)
        cflags.append("-fvisibility=hidden")
    cflags += ["-O0", "-g3"] if DEBUG else ["-O2"]
    ldflags = []
    if SANITIZE:
        cflags += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g"]
        ldflags += [f"-fsanitize={SANITIZE}"]
    return cflags, ldflags


def msvc_flags():
    if SANITIZE:
        raise SystemExit("PYWHEEL_SANITIZE: gcc and clang only")
    cflags = ["/std:c11", "/experimental:c11atomics", "/W3"]
    cflags += ["/Od", "/Zi"] if DEBUG else ["/O2"]
    return cflags, []


class BuildExt(build_ext):
    """Sets each extension's flags for the compiler actually used."""

    def build_extensions(self):
        msvc = self.compiler.compiler_type == "msvc"
        cflags, ldflags = msvc_flags() if msvc else gcc_flags()
        for ext in self.extensions:
            ext.extra_compile_args = cflags
            ext.extra_link_args = ldflags
            ext.libraries = [] if WINDOWS else ["pthread"]
        super().build_extensions()


HERE = os.path.dirname(os.path.abspath(__file__))


def files(pattern):
    # Relative paths (setuptools wants them), found from this file's folder.
    return sorted(glob.glob(pattern, root_dir=HERE))


# The core, with both files of its platform layer (each compiles to nothing
# on the other platform).
CORE = [
    "csrc/core/wheel.c",
    "csrc/core/driver.c",
    "csrc/core/slab.c",
    "csrc/core/platform_posix.c",
    "csrc/core/platform_win32.c",
]

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "pywheel._core",
            # The core (csrc/core/: libc and the platform's threads, never
            # Python.h) and the CPython binding (csrc/binding/), every file of
            # each; the core's own C test programs (test_*.c) are not part of it.
            sources=CORE + files("csrc/binding/*.c"),
            depends=files("csrc/core/*.h") + files("csrc/binding/*.h"),
            include_dirs=["csrc/core", "csrc/binding"],
            define_macros=[("PW_WIN_TICK_COUNT", "1")]
            if WINDOWS and sys.version_info < (3, 13)
            else [],
            undef_macros=["NDEBUG"] if DEBUG else [],
        )
    ],
)
