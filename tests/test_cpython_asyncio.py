"""CPython's own asyncio tests, run on WheelEventLoop (see
tests/cpython/run_asyncio_suite.py for how loops are redirected and which
tests cannot apply).  The timer modules run in the test command; the wider
set (tasks, locks, queues, streams, sockets) behind -m slow."""

import concurrent.futures
import os
import re
import subprocess
import sys

import pytest
from helpers import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "tests", "cpython", "run_asyncio_suite.py")

try:
    import test.test_asyncio  # noqa: F401  (not every Python ships its test suite)
except ImportError:
    # CI's 3.14/3.15 run (.ci/forky) installs Debian's libpython3.X-testsuite
    # and sets PYWHEEL_REQUIRE_CPYTHON_SUITE=1: there a missing suite fails.
    if os.environ.get("PYWHEEL_REQUIRE_CPYTHON_SUITE") == "1":
        raise
    pytest.skip(
        "this Python has no test.test_asyncio (Debian: apt-get install libpython3.X-testsuite)",
        allow_module_level=True,
    )

TIMER_GROUPS = [
    ["test_timeouts", "test_waitfor", "test_base_events", "test_taskgroups"],
    ["test_events"],
]
WIDER_GROUPS = [
    ["test_tasks"],
    ["test_locks", "test_queues", "test_streams", "test_sock_lowlevel"],
]


def run_groups(groups):
    env = child_env()

    def run(group):
        names = [f"test.test_asyncio.{m}" for m in group]
        return subprocess.run(
            [sys.executable, RUNNER, *names],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=ROOT,
        )

    with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
        results = list(pool.map(run, groups))
    for group, proc in zip(groups, results, strict=True):
        summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        print(group, summary)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        m = re.search(r"ran (\d+), on a WheelEventLoop (\d+)", summary)
        assert m and int(m.group(2)) > 0, summary


def test_cpython_timer_tests_on_wheel_loop():
    run_groups(TIMER_GROUPS)


@pytest.mark.slow
def test_cpython_wider_asyncio_tests_on_wheel_loop():
    run_groups(WIDER_GROUPS)
