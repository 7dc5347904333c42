"""Declares the C extension; the project's metadata lives in pyproject.toml.

Environment switches (the msgspec habit):
  PYWHEEL_SANITIZE=address,undefined   build with those sanitizers
  PYWHEEL_DEBUG=1                      -O0 -g, assertions kept
"""

import glob
import os

from setuptools import Extension, setup

cflags = ["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"]
ldflags = []
undef = []
if os.environ.get("PYWHEEL_DEBUG"):
    cflags += ["-O0", "-g3"]
    undef = ["NDEBUG"]
else:
    cflags += ["-O2"]
sanitize = os.environ.get("PYWHEEL_SANITIZE")
if sanitize:
    cflags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g"]
    ldflags += [f"-fsanitize={sanitize}"]

HERE = os.path.dirname(os.path.abspath(__file__))


def files(pattern):
    # Relative paths (setuptools wants them), found from this file's folder.
    return sorted(glob.glob(pattern, root_dir=HERE))


CORE = ["csrc/core/wheel.c", "csrc/core/driver.c", "csrc/core/slab.c"]

setup(
    ext_modules=[
        Extension(
            "pywheel._core",
            # The core (csrc/core/: libc and pthreads, never Python.h) and
            # the CPython binding (csrc/binding/), every file of each; the
            # core's own C test programs (test_*.c) are not part of it.
            sources=CORE + files("csrc/binding/*.c"),
            depends=files("csrc/core/*.h") + files("csrc/binding/*.h"),
            include_dirs=["csrc/core", "csrc/binding"],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            undef_macros=undef,
            libraries=["pthread"],
        )
    ],
)
