"""The C sources show the layers (docs/development.md, "Layout").

csrc/core/ is the pure core (the wheel, the driver, the slabs and their C
tests): libc and the platform's threads only (pthreads or Win32, behind
platform.h), so nothing in it may include Python.h.
csrc/binding/ is the CPython binding, split by concern; no C file there or in
the core (the core's C test programs aside) grows past 1,000 lines.
"""

import os
import re

import pytest
from helpers import CSRC, NO_CSRC

pytestmark = pytest.mark.skipif(not os.path.isdir(CSRC), reason=NO_CSRC)

CORE = os.path.join(CSRC, "core")
BINDING = os.path.join(CSRC, "binding")
LIMIT = 1000
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def c_files(folder):
    return sorted(
        os.path.join(d, f)
        for d, _, names in os.walk(folder)
        for f in names
        if f.endswith((".c", ".h"))
    )


def test_the_two_rooms_exist_and_hold_all_the_c():
    assert c_files(CORE) and c_files(BINDING)
    assert set(c_files(CSRC)) == set(c_files(CORE)) | set(c_files(BINDING))


def test_the_core_never_includes_python_h():
    offenders = []
    for path in c_files(CORE):
        with open(path) as f:
            for name in INCLUDE.findall(f.read()):
                if os.path.basename(name) in ("Python.h", "structmember.h", "pyconfig.h"):
                    offenders.append(f"{os.path.relpath(path, CSRC)}: #include {name}")
    assert not offenders, offenders


def test_the_core_includes_only_itself_and_the_c_library():
    # A quote include in the core names a core header; the binding's
    # headers are one room up and may not be reached from here.
    core_headers = {os.path.basename(p) for p in c_files(CORE) if p.endswith(".h")}
    for path in c_files(CORE):
        with open(path) as f:
            text = f.read()
        for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
            assert name in core_headers, f"{os.path.relpath(path, CSRC)} includes {name}"


def test_no_c_file_is_longer_than_the_limit():
    long = []
    for path in c_files(CSRC):
        if os.path.basename(path).startswith("test_"):
            continue  # the C test programs are checklists, long by nature
        with open(path) as f:
            n = sum(1 for _ in f)
        if n > LIMIT:
            long.append(f"{os.path.relpath(path, CSRC)}: {n} lines")
    assert not long, f"split these (limit {LIMIT}): {long}"
