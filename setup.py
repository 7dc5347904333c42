"""Declares the C extension; the project's metadata lives in pyproject.toml.

Environment switches (the msgspec habit):
  PYWHEEL_SANITIZE=address,undefined   build with those sanitizers
  PYWHEEL_DEBUG=1                      -O0 -g, assertions kept
"""

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

setup(
    ext_modules=[
        Extension(
            "pywheel._core",
            sources=["csrc/wheel.c", "csrc/driver.c", "csrc/slab.c", "csrc/module.c"],
            depends=["csrc/wheel.h", "csrc/driver.h", "csrc/slab.h"],
            include_dirs=["csrc"],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            undef_macros=undef,
            libraries=["pthread"],
        )
    ],
)
