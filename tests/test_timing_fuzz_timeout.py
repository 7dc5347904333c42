"""pytest-timeout under --timing-fuzz: each run of a fuzzed test (its setup,
call and teardown) gets the whole budget, as the test has without the fuzz;
one run that takes longer still times out, and the report names the run
(docs/howto/real-suites.md, "With pytest-timeout").  Both of pytest-timeout's
methods; real time passes honestly (time.sleep in the test's body)."""

import pytest
from helpers import run_pytest

pytest.importorskip("pytest_timeout")

# Each run sleeps 0.3 s of real time: ten runs (the punctual one and nine
# under --timing-fuzz=9) take 3 s, past a 2 s budget; one takes 0.3 s.
SUITE = """
import asyncio
import time

import pytest


@pytest.mark.virtual_time(clocks=False)
async def test_each_run_fits():
    time.sleep(0.3)
    await asyncio.sleep(1)


@pytest.mark.virtual_time(clocks=False)
async def test_a_fuzz_run_hangs():
    await asyncio.sleep(1)
    if asyncio.get_running_loop().timing is not None:
        time.sleep(60)  # only under the fuzz: its run 1 hangs


@pytest.mark.virtual_time(clocks=False)
async def test_the_punctual_run_hangs():
    time.sleep(60)
"""

METHODS = ["signal", "thread"]


@pytest.mark.parametrize("method", METHODS)
def test_each_fuzz_run_has_the_whole_budget(tmp_path, method):
    r = run_pytest(
        tmp_path,
        {"test_t.py": SUITE},
        "--timing-fuzz=9",
        "--timeout=2",
        f"--timeout-method={method}",
        "test_t.py::test_each_run_fits",
        timeout=120,
    )
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr


def test_a_fuzz_run_longer_than_the_budget_times_out_naming_its_run_signal(tmp_path):
    r = run_pytest(
        tmp_path,
        {"test_t.py": SUITE},
        "--timing-fuzz=9",
        "--timeout=2",
        "--timeout-method=signal",
        "test_t.py::test_a_fuzz_run_hangs",
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Timeout (>2.0s) from pytest-timeout" in r.stdout, r.stdout
    assert "failed on timing-fuzz run 1 of 9" in r.stdout, r.stdout
    assert "--timing-replay=" in r.stdout


def test_a_fuzz_run_longer_than_the_budget_times_out_naming_its_run_thread(tmp_path):
    # The thread method ends the process from its timer thread, before any
    # report: the line naming the run comes with its stack dump.
    r = run_pytest(
        tmp_path,
        {"test_t.py": SUITE},
        "--timing-fuzz=9",
        "--timeout=2",
        "--timeout-method=thread",
        "test_t.py::test_a_fuzz_run_hangs",
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Timeout" in out, out
    assert "test_a_fuzz_run_hangs timed out in timing-fuzz run 1 of 9 (--timing-replay=" in out


@pytest.mark.parametrize("method", METHODS)
def test_the_punctual_run_still_times_out(tmp_path, method):
    r = run_pytest(
        tmp_path,
        {"test_t.py": SUITE},
        "--timing-fuzz=3",
        "--timeout=1",
        f"--timeout-method={method}",
        "test_t.py::test_the_punctual_run_hangs",
        timeout=120,
    )
    assert r.returncode == 1 and "Timeout" in r.stdout + r.stderr, r.stdout + r.stderr


def test_func_only_times_each_call_as_before(tmp_path):
    files = {"test_t.py": SUITE, "pytest.ini": "[pytest]\ntimeout_func_only = true\n"}
    r = run_pytest(
        tmp_path, files, "--timing-fuzz=9", "--timeout=2", "test_t.py::test_each_run_fits"
    )
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr


def test_without_a_timeout_nothing_changes(tmp_path):
    r = run_pytest(
        tmp_path, {"test_t.py": SUITE}, "--timing-fuzz=2", "-p", "no:timeout", "-k", "fits"
    )
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
