"""The C test programs, built with the system compiler and run from pytest.

csrc/core/test_wheel.c drives the pure wheel with randomized schedules against a
brute-force model and calls the wheel's checker after every step;
csrc/core/test_driver.c runs the driver thread without Python;
csrc/core/test_slab.c the slab allocator.  The core's system calls live behind
its platform layer (csrc/core/platform.h; `make windows-check` builds and runs
the same programs for Windows under wine)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
CORE = os.path.join(CSRC, "core")  # the pure wheel, driver and slabs; no Python.h
BINDING = os.path.join(CSRC, "binding")  # the CPython binding
CC = os.environ.get("CC", "cc")
# The platform layer: both files in every build, each compiles to nothing on
# the other platform.
PLATFORM = ["platform_posix.c", "platform_win32.c"]
DRIVER = ["test_driver.c", "driver.c", "wheel.c", *PLATFORM]
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", CORE, "-I", BINDING]

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="needs a C compiler")


def build(tmp_path_factory, name: str, sources: list[str], extra: list[str] = ()) -> str:
    out = str(tmp_path_factory.mktemp("cbuild") / name)
    cmd = [CC, *CFLAGS, *extra, "-o", out, *[os.path.join(CORE, s) for s in sources], "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def test_wheel(tmp_path_factory):
    return build(tmp_path_factory, "test_wheel", ["test_wheel.c", "wheel.c"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_wheel_randomized_against_model(test_wheel, seed):
    proc = subprocess.run([test_wheel, str(seed)], capture_output=True, text=True, timeout=120)
    sys.stdout.write(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_driver_thread_from_c(tmp_path_factory):
    # Firing, never early, adds and cancels from 4 threads, lost wake-up,
    # idleness and stop: the driver on its own, without Python.
    exe = build(tmp_path_factory, "test_driver", DRIVER)
    proc = subprocess.run([exe, "4", "5000"], capture_output=True, text=True, timeout=60)
    sys.stdout.write(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_driver_checks_wait_for_the_last_batch(tmp_path_factory):
    # Every run hook takes 30 ms: the last batch leaves the wheel long before
    # its runs are counted, which once failed this program on loaded machines
    # ("item 3824 fired 0 times"); it must wait for the runs, not the wheel.
    exe = build(tmp_path_factory, "test_driver", DRIVER)
    proc = subprocess.run([exe, "2", "2000", "30"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_slabs_from_c(tmp_path_factory):
    exe = build(tmp_path_factory, "test_slab", ["test_slab.c", "slab.c", *PLATFORM])
    proc = subprocess.run([exe, "1"], capture_output=True, text=True, timeout=120)
    sys.stdout.write(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_only_the_platform_layer_names_the_system_threads():
    # pthreads and Win32 are platform.h's and platform_*.c's business: the
    # rest of the core goes through pw_mutex, pw_cond, pw_thread, ..., so that
    # it builds on both (the C test programs included).
    system = re.compile(r"\bpthread_\w+|<pthread\.h>|<windows\.h>|\bsigset_t\b|\bsigfillset\b")
    offenders = []
    for name in sorted(os.listdir(CORE)):
        if name.startswith("platform") or not name.endswith((".c", ".h")):
            continue
        with open(os.path.join(CORE, name)) as f:
            for n, line in enumerate(f, 1):
                if system.search(line):
                    offenders.append(f"{name}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_broken_slot_computation_is_caught(tmp_path_factory):
    # The same program against a wheel sabotaged to file timers one slot
    # late: the checker and the model must both notice.
    exe = build(
        tmp_path_factory, "test_wheel_broken", ["test_wheel.c", "wheel.c"], ["-DPW_TEST_BREAK_SLOT"]
    )
    proc = subprocess.run([exe, "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, "a wheel that files timers one slot late passed the C tests"


def test_extension_compiles_without_warnings():
    import sysconfig

    include = sysconfig.get_paths()["include"]
    # Every C file of both folders (a new binding file is checked unasked).
    sources = [os.path.join(d, f) for d in (CORE, BINDING) for f in sorted(os.listdir(d))]
    for src in [s for s in sources if s.endswith(".c")]:
        cmd = [CC, *CFLAGS, "-fsyntax-only", "-I", include, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
