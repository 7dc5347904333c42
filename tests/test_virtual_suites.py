"""Real suites on virtual time: each suite of benchmarks/virtual_suites.py
(aiolimiter, async-lru, aiocache's memory backend, tenacity's asyncio tests,
aiohttp's client and websocket functional tests), unmodified, from its sdist,
passes under ``pytest --virtual-time`` wherever it passes on the stock loop,
except the tests in EXCEPTED (listed with their reasons in
docs/explanation/virtual-time.md, "Tests that differ under --virtual-time").

The venvs are made once under ~/.cache/pywheel-virtual-suites
(benchmarks/sdists.py) from PyPI; a suite whose sdist or dependencies cannot
be had (offline) is skipped, saying why.  Marked ``virtual_suites`` and
deselected by default, as ``real_bugs`` is: the five suites take minutes, and
CI is near its time budget; ``make virtual-suites`` runs this file, then the
benchmark.  Wall times are the benchmark's business, not asserted here.
"""

import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "benchmarks" / "virtual_suites.py").is_file():
    pytest.skip("benchmarks/ is not next to tests/", allow_module_level=True)
if str(ROOT) not in sys.path:  # an installed-wheel run keeps the tree off the path
    sys.path.insert(0, str(ROOT))

from benchmarks import virtual_suites as vs  # noqa: E402
from benchmarks.sdists import Unavailable, node_id, sdist_dir  # noqa: E402

pytestmark = pytest.mark.virtual_suites

_HANDLE = (
    "isinstance(handle, asyncio.Handle): pywheel's timer handles are its C "
    "TimerHandle, not asyncio.Handle subclasses (docs/explanation/asyncio-differences.md)"
)
#: suite -> {junit id: reason}: passes on stock, not under --virtual-time.
EXCEPTED = {
    "aiocache": {
        "tests.ut.backends.test_memory.TestSimpleMemoryBackend::test_set_ttl_handle": _HANDLE,
        "tests.ut.backends.test_memory.TestSimpleMemoryBackend::test_expire_no_handle_ttl": _HANDLE,
        "tests.ut.backends.test_memory.TestSimpleMemoryBackend::test_expire_handle_ttl": _HANDLE,
    },
}


def _venv(suite):
    try:
        return vs.venv(suite)
    except Unavailable as exc:
        pytest.skip(f"{suite}'s sdist or test dependencies cannot be had here: {exc}")


def _passed(res):
    return {t for t, o in res["outcomes"].items() if o == "pass"}


def _tail(out, name):
    with open(os.path.join(out, name + ".log")) as f:
        return "".join(f.readlines()[-15:])


#: the suites as their projects run them (aiohttp-fast is a benchmark variant;
#: MORE_SUITES, issue 27's, are run by name: some of their tests need an
#: outside clock, docs/explanation/virtual-time.md lists them)
SUITES = [name for name in vs.DEFAULT_SUITES if "venv" not in vs.SUITES[name]]


@pytest.mark.parametrize("suite", SUITES)
def test_suite_loses_nothing_on_virtual_time(suite, tmp_path):
    _venv(suite)
    out = str(tmp_path)
    stock = vs.run(suite, "stock", out)
    virtual = vs.run(suite, "virtual", out)
    on_stock = _passed(stock)
    assert on_stock, f"{suite} passed nothing on stock:\n{_tail(out, suite + '-stock')}"
    assert not stock["loops"], "the stock run made fake-time loops"
    assert virtual["loops"].get("VirtualEventLoop", 0) > 0, "--virtual-time made no loop"
    excepted = EXCEPTED.get(suite, {})
    for tid in excepted:  # the list names tests that exist and still need it
        assert tid in stock["outcomes"], f"{tid} is no longer in {suite}'s suite"
        assert virtual["outcomes"].get(tid) != "pass", (
            f"{tid} passes on virtual time now: drop it from EXCEPTED and the docs"
        )
    lost = sorted(t for t in on_stock - _passed(virtual) if t not in excepted)
    if lost:  # once more, alone: what the full run's load or order did is said apart
        src = sdist_dir(vs.CACHE, vs.SUITES[suite]["sdist"])
        again = vs.run(suite, "virtual", out, tag="-again",
                       extra=[node_id(src, t) for t in lost])  # fmt: skip
        still = [t for t in lost if again["outcomes"].get(t) != "pass"]
        assert not still, (
            f"{suite}: passed on stock, not under pytest --virtual-time (also alone): {still}\n"
            + _tail(out, suite + "-virtual-again")
        )
        pytest.fail(
            f"{suite}: passed on stock, failed in the full --virtual-time run but passed "
            f"alone (order- or load-dependent on virtual time): {lost}"
        )


STOP_AFTER_DELAY = """
    import asyncio
    import time

    from tenacity import AsyncRetrying, RetryError, stop_after_delay, wait_fixed

    async def retry_for_a_second():
        loop = asyncio.get_running_loop()
        attempts = 0
        t0 = loop.time()
        try:
            async for attempt in AsyncRetrying(stop=stop_after_delay(1), wait=wait_fixed(0.1)):
                with attempt:
                    attempts += 1
                    raise ValueError
        except RetryError:
            pass
        print("ATTEMPTS", attempts, "ELAPSED", loop.time() - t0)
        return attempts

    def test_stop_after_delay():  # as tenacity's own tests: asyncio.run
        attempts = asyncio.run(retry_for_a_second())
        # a wait of 0.1 s between attempts, stopping once 1 s has passed
        assert 10 <= attempts <= 12, attempts
"""


def test_tenacity_stop_after_delay_follows_virtual_time(tmp_path):
    """tenacity's stop_after_delay reads time.monotonic(): on virtual time it
    stops after one virtual second because that clock follows the loop's
    (issue 20, point 3); with --virtual-time-clocks=off it does not."""
    import subprocess

    py = _venv("tenacity")
    (tmp_path / "test_delay.py").write_text(textwrap.dedent(STOP_AFTER_DELAY))
    env = dict(os.environ, PYTHONPATH=vs.PLUGINS)

    def pytest_run(*args):
        cmd = [py, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
               *vs.MODE_ARGS["virtual"], *args, "test_delay.py"]  # fmt: skip
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    on = pytest_run()
    assert on.returncode == 0, on.stdout + on.stderr
    off = pytest_run("--virtual-time-clocks=off", "--virtual-time-limit=5")
    assert off.returncode != 0, off.stdout  # real clocks: not 1 virtual second
