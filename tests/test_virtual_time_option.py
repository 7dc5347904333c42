"""``pytest --virtual-time`` switches a whole suite over with no conftest:
asyncio.run, pytest-asyncio, IsolatedAsyncioTestCase and anyio all get a
VirtualEventLoop; ``--virtual-time-limit`` applies per test; and
``--timing-fuzz`` finds examples/timing_bugs/'s bugs from the command line,
passes their fixed twins and names a replay token that fails again.  Each
run is a fresh pytest in a subprocess."""

import asyncio
import re
import sys
from pathlib import Path

import pytest
from helpers import run_pytest, run_shell

from pywheel.testing import _session

ROOT = Path(__file__).resolve().parent.parent

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

SUITE = """
import asyncio, unittest
import pytest

def kind():
    return type(asyncio.get_running_loop()).__name__

@pytest.mark.asyncio
async def test_pytest_asyncio():
    await asyncio.sleep(3600)
    assert kind() == "VirtualEventLoop"
    assert asyncio.get_running_loop().time() >= 3600

def test_asyncio_run():
    async def main():
        await asyncio.sleep(3600)
        return kind(), asyncio.get_running_loop().time()
    kind_, t = asyncio.run(main())
    assert kind_ == "VirtualEventLoop" and 3600.0 < t < 3600.001  # and 10 µs iterations

def test_runner():
    with asyncio.Runner() as runner:
        assert type(runner.get_loop()).__name__ == "VirtualEventLoop"
        runner.run(asyncio.sleep(3600))

class Case(unittest.IsolatedAsyncioTestCase):
    async def test_isolated(self):
        await asyncio.sleep(3600)
        self.assertEqual(kind(), "VirtualEventLoop")
"""

ANYIO_SUITE = """
import asyncio
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"  # the suite's own fixture, as suites write it

@pytest.mark.anyio
async def test_anyio():
    await asyncio.sleep(3600)
    assert type(asyncio.get_running_loop()).__name__ == "VirtualEventLoop"
"""


def _pytest(tmp_path, files, *args, pythonpath=None):
    return run_pytest(tmp_path, files, *args, pythonpath=pythonpath, timeout=300)


def _counts(r) -> dict:
    tail = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tail)}


def test_whole_suite_on_virtual_time(tmp_path):
    pytest.importorskip("pytest_asyncio")
    files = {"pytest.ini": INI, "test_suite.py": SUITE}
    r = _pytest(tmp_path, files, "--virtual-time")
    assert _counts(r) == {"passed": 4}, r.stdout + r.stderr
    # Without the flag the same suite sees stock loops (and would sleep).
    r = _pytest(tmp_path, {"test_stock.py": SUITE.replace("3600", "0")}, "test_stock.py")
    assert _counts(r) == {"failed": 4}, r.stdout + r.stderr


def test_ini_option(tmp_path):
    pytest.importorskip("pytest_asyncio")
    files = {"pytest.ini": INI + "virtual_time = true\n", "test_suite.py": SUITE}
    r = _pytest(tmp_path, files)
    assert _counts(r) == {"passed": 4}, r.stdout + r.stderr


def test_anyio_backend(tmp_path):
    pytest.importorskip("anyio", reason="anyio is not installed")
    r = _pytest(tmp_path, {"test_anyio.py": ANYIO_SUITE}, "--virtual-time")
    assert _counts(r) == {"passed": 1}, r.stdout + r.stderr


def test_limit_per_test(tmp_path):
    pytest.importorskip("pytest_asyncio")
    files = {"pytest.ini": INI, "test_suite.py": SUITE}
    r = _pytest(tmp_path, files, "--virtual-time", "--virtual-time-limit=100")
    assert _counts(r) == {"failed": 4}, r.stdout + r.stderr
    assert r.stdout.count("TimeLimitError: virtual time limit reached") >= 4, r.stdout
    # 3601: each test's sleep(3600) ends a few 10 µs iterations past 3600
    r = _pytest(tmp_path, files, "--virtual-time", "--virtual-time-limit=3601")
    assert _counts(r) == {"passed": 4}, r.stdout + r.stderr


def test_fuzz_needs_a_bound_and_a_good_token(tmp_path):
    files = {"test_x.py": "async def test_x(): pass\n"}
    # Bounds given, all 0 (the others are 0 once one is given): nothing to fuzz.
    # (With none given, --timing-fuzz uses timings()'s defaults:
    # tests/test_timing_fuzz_defaults.py.)
    r = _pytest(tmp_path, files, "--timing-fuzz=3", "--timing-max-late=0")
    assert r.returncode != 0 and "needs at least one non-zero bound" in r.stderr
    r = _pytest(tmp_path, files, "--timing-replay=nonsense")
    assert r.returncode != 0 and "is not a token" in r.stderr


def test_session_patch_is_restored():
    before = (asyncio.new_event_loop, asyncio.events.new_event_loop)
    factories = {cls: vars(cls)["_loop_factory"] for cls in _session._policy_classes()}
    _session.install()
    try:
        loop = asyncio.new_event_loop()
        try:
            assert type(loop).__name__ == "VirtualEventLoop"
        finally:
            loop.close()
    finally:
        _session.uninstall()
    assert (asyncio.new_event_loop, asyncio.events.new_event_loop) == before
    assert {cls: vars(cls)["_loop_factory"] for cls in factories} == factories


# The plain-pytest twin of each example: no hypothesis, no pywheel code.
TWIN_ASYNCIO = """
import pytest
from examples.timing_bugs import {name} as m

@pytest.mark.asyncio
async def test_bug():
    await m.scenario()

@pytest.mark.asyncio
async def test_fixed():
    await m.scenario(fixed=True)
"""

BOUND = {"max_late": "--timing-max-late", "max_cost": "--timing-max-cost"}
BOUND["max_jitter"] = "--timing-max-jitter"


def _examples():
    sys.path.insert(0, str(ROOT))
    try:
        from examples.timing_bugs import EXAMPLES
    finally:
        sys.path.remove(str(ROOT))
    return EXAMPLES


# slow: six pytest runs of 100 fuzzed runs each (about a minute); CI runs it
# once, on the default python3, with the rest of the slow subset
@pytest.mark.slow
@pytest.mark.skipif(
    not (ROOT / "examples" / "timing_bugs").is_dir(), reason="examples/ is not next to tests/"
)
@pytest.mark.parametrize("name", _examples() if (ROOT / "examples").is_dir() else [])
def test_fuzz_finds_example_bug_and_replays_it(tmp_path, name):
    pytest.importorskip("pytest_asyncio")
    if name == "lru_ttl":
        pytest.importorskip("async_lru")
    sys.path.insert(0, str(ROOT))
    try:
        import importlib

        perturb = importlib.import_module(f"examples.timing_bugs.{name}").PERTURB
    finally:
        sys.path.remove(str(ROOT))
    bounds = [f"{BOUND[k]}={v!r}" for k, v in perturb.items()]
    files = {"pytest.ini": INI, f"test_{name}.py": TWIN_ASYNCIO.format(name=name)}
    # The punctual run passes both.
    r = _pytest(tmp_path, files, "--virtual-time", pythonpath=ROOT)
    assert _counts(r) == {"passed": 2}, r.stdout + r.stderr
    r = _pytest(tmp_path, files, "--timing-fuzz=100", *bounds, pythonpath=ROOT)
    assert _counts(r) == {"passed": 1, "failed": 1}, r.stdout + r.stderr
    assert f"FAILED test_{name}.py::test_bug" in r.stdout
    assert "pywheel.testing timing fuzz" in r.stdout
    assert "virtual time at the end of each loop of the run: t=" in r.stdout
    m = re.search(r"^replay: (.*) --virtual-time --timing-replay=(\S+)$", r.stdout, re.M)
    assert m is not None and m.group(1).endswith(f" test_{name}.py::test_bug"), r.stdout
    failed = re.search(r"^FAILED .*$", r.stdout, re.M).group(0)
    # The replay line, run as printed, fails the same way.
    r2 = run_shell(tmp_path, m.group(0).removeprefix("replay: "), pythonpath=ROOT)
    assert _counts(r2) == {"failed": 1}, r2.stdout + r2.stderr
    assert failed in r2.stdout, (failed, r2.stdout)
    # The same command draws the same schedules.
    r3 = _pytest(tmp_path, files, "--timing-fuzz=100", *bounds, pythonpath=ROOT)
    assert m.group(0) in r3.stdout


def test_fuzz_reaches_the_marker_and_spares_sync_tests(tmp_path):
    files = {
        "test_m.py": """
        import asyncio
        import pytest

        RUNS = []

        @pytest.mark.virtual_time
        async def test_marked():
            loop = asyncio.get_running_loop()
            RUNS.append(loop.timing is not None)
            await asyncio.sleep(1)

        def test_sync():
            RUNS.append("sync")

        def test_count():
            # test_marked: the punctual run, then 5 under a Timing.
            assert RUNS == [False] + [True] * 5 + ["sync"]
        """
    }
    r = _pytest(tmp_path, files, "--timing-fuzz=5", "--timing-max-late=0.01")
    assert _counts(r) == {"passed": 3}, r.stdout + r.stderr
