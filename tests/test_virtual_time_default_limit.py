"""The pytest plugin's default virtual-time limit: a test that awaits what
nobody sets while a repeating timer exists (a session fixture's heartbeat)
ends in TimeLimitError naming the pending timers and the waiting tasks,
instead of jumping from timer to timer for ever; the limit is per test
(a loop shared by tests gets a fresh budget for each), and an option, the
ini file and a marker change it.  Each run is a fresh pytest in a subprocess
with a timeout: before the default existed, these runs never ended."""

import re

import pytest
from helpers import run_pytest

from pywheel.testing.pytest_plugin import DEFAULT_LIMIT

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

HEARTBEAT_CONFTEST = """
import asyncio
import pytest
import pytest_asyncio

@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def heartbeat():
    async def beat():
        while True:
            await asyncio.sleep(1.0)
    task = asyncio.create_task(beat(), name="heartbeat")
    yield
    task.cancel()
"""

HEARTBEAT_TESTS = """
import asyncio
import pytest

@pytest.mark.asyncio(loop_scope="session")
async def test_waits_for_nothing():
    never = asyncio.Event()
    await never.wait()
"""


def _pytest(tmp_path, files, *args):
    # 60 s: the default limit is reached in well under a second here; a run
    # that spins (no limit) is cut off and fails the test.
    return run_pytest(tmp_path, files, *args, timeout=60)


def test_a_heartbeat_cannot_spin_a_test_forever(tmp_path):
    pytest.importorskip("pytest_asyncio")
    files = {"pytest.ini": INI, "conftest.py": HEARTBEAT_CONFTEST, "test_x.py": HEARTBEAT_TESTS}
    r = _pytest(tmp_path, files, "--virtual-time")
    out = r.stdout + r.stderr
    assert "1 failed" in r.stdout, out
    assert "TimeLimitError: virtual time limit reached" in r.stdout, out
    assert f"past the limit t={DEFAULT_LIMIT!r}" in r.stdout, out
    # The repeating timer's owner and where it waits; the waiting test task.
    assert "timers pending: task 'heartbeat' in beat() at conftest.py:10 (sleeping)" in out
    assert "waiting: task in test_waits_for_nothing() at test_x.py:8" in out
    assert "--virtual-time-limit=SECONDS|none" in out  # how to change it


CALLBACK_TESTS = """
import asyncio
import pytest

class Poller:
    def __init__(self, loop):
        self.loop = loop
        self.tick()

    def tick(self):
        self.loop.call_later(0.1, self.tick)

@pytest.mark.virtual_time
async def test_marker_loop_with_a_rearming_callback():
    Poller(asyncio.get_running_loop())
    await asyncio.Event().wait()

def test_fixture_loop(virtual_loop):
    Poller(virtual_loop)
    virtual_loop.run_until_complete(asyncio.Event().wait())
"""


def test_a_rearming_callback_is_named_where_it_is_defined(tmp_path):
    r = _pytest(tmp_path, {"test_x.py": CALLBACK_TESTS}, "-p", "no:asyncio", "-p", "no:anyio")
    out = r.stdout + r.stderr
    assert "2 failed" in r.stdout, out
    # Each test's error names it (counted on the traceback's error lines: the
    # short summary repeats the message in full or cut, by terminal and CI).
    named = re.findall(
        r"^E +\S*TimeLimitError: .*timers pending: Poller\.tick\(\) defined at test_x\.py:10",
        r.stdout,
        re.M,
    )
    assert len(named) == 2, out
    assert "waiting: task in test_marker_loop_with_a_rearming_callback() at test_x.py:16" in out


LIMITS = """
import asyncio
import pytest

async def long_sleep(seconds):
    await asyncio.sleep(seconds)

def test_under_the_default():
    asyncio.run(long_sleep({under}))

def test_over_the_default():
    asyncio.run(long_sleep({over}))

@pytest.mark.virtual_time_limit(10)
def test_marker_lowers_it():
    asyncio.run(long_sleep(11))

@pytest.mark.virtual_time_limit(None)
def test_marker_lifts_it():
    asyncio.run(long_sleep(10 * {over}))
"""


def test_default_limit_option_ini_and_marker(tmp_path):
    code = LIMITS.format(under=DEFAULT_LIMIT - 100, over=DEFAULT_LIMIT + 100)
    files = {"test_l.py": code}
    r = _pytest(tmp_path, files, "--virtual-time", "-rA")
    found = re.findall(r"^(PASSED|FAILED) test_l\.py::(\w+)", r.stdout, re.M)
    got = {name: outcome for outcome, name in found}
    assert got == {
        "test_under_the_default": "PASSED",
        "test_over_the_default": "FAILED",
        "test_marker_lowers_it": "FAILED",
        "test_marker_lifts_it": "PASSED",
    }, r.stdout + r.stderr
    # The option: none lifts it, a number sets it.
    r = _pytest(tmp_path, files, "--virtual-time", "--virtual-time-limit=none", "-rA")
    assert "FAILED test_l.py::test_over_the_default" not in r.stdout, r.stdout
    assert "1 failed, 3 passed" in r.stdout, r.stdout  # the marker's 10 s still holds
    r = _pytest(tmp_path, files, "--virtual-time", "--virtual-time-limit=50", "-rA")
    assert "FAILED test_l.py::test_under_the_default" in r.stdout, r.stdout
    # The ini option.
    files["pytest.ini"] = "[pytest]\nvirtual_time_limit = none\n"
    r = _pytest(tmp_path, files, "--virtual-time", "-rA")
    assert "FAILED test_l.py::test_over_the_default" not in r.stdout, r.stdout + r.stderr
    r = _pytest(tmp_path, {"pytest.ini": "[pytest]\nvirtual_time_limit = -1\n"}, "--virtual-time")
    assert r.returncode != 0 and "virtual_time_limit (ini)" in r.stderr, r.stdout + r.stderr


SHARED = """
import asyncio
import pytest

@pytest.mark.asyncio(loop_scope="module")
async def test_one():
    await asyncio.sleep({each})

@pytest.mark.asyncio(loop_scope="module")
async def test_two():
    await asyncio.sleep({each})
    assert asyncio.get_running_loop().time() >= 2 * {each}  # one loop, two budgets
"""


def test_the_limit_is_per_test_on_a_shared_loop(tmp_path):
    pytest.importorskip("pytest_asyncio")
    files = {"pytest.ini": INI, "test_s.py": SHARED.format(each=75)}
    r = _pytest(tmp_path, files, "--virtual-time", "--virtual-time-limit=100")
    assert "2 passed" in r.stdout, r.stdout + r.stderr
    files = {"pytest.ini": INI, "test_s.py": SHARED.format(each=DEFAULT_LIMIT * 0.75)}
    r = _pytest(tmp_path, files, "--virtual-time")
    assert "2 passed" in r.stdout, r.stdout + r.stderr


def test_time_limit_error_names_pending_timers_and_waiting_tasks():
    """The loop's own message, without the plugin: whose timers are pending
    (a callback where it is defined, a sleeping task, a timeout's task) and
    which tasks wait for something else; under a Timing that charges
    callbacks too (their wrapped callbacks are named, not the wrapper)."""
    import asyncio

    from pywheel import testing

    class Poller:
        def tick(self):
            asyncio.get_running_loop().call_later(0.5, self.tick)

    async def beat():
        while True:
            await asyncio.sleep(1)

    async def guarded():
        async with asyncio.timeout(10_000):
            await asyncio.Event().wait()

    async def main():
        Poller().tick()
        asyncio.create_task(beat(), name="heartbeat")
        asyncio.create_task(guarded(), name="guarded")
        await asyncio.Event().wait()

    for timing in (None, testing.Timing(max_cost=0.002, draw=lambda n: n)):
        with pytest.raises(testing.TimeLimitError) as info:
            testing.run(main(), limit=100, timing=timing)
        text = str(info.value)
        assert "limit t=100.0" in text, text  # (with the Timing: its costs reach it)
        pending = text.split("timers pending: ", 1)[1].split("; waiting: ")[0]
        assert "Poller.tick() defined at test_virtual_time_default_limit.py:" in pending, text
        assert "task 'heartbeat' in beat() at test_virtual_time_default_limit.py:" in pending
        assert "(sleeping)" in pending and "task 'guarded' in guarded() at" in pending, text
        assert "(a timeout)" in pending, text
        waiting = text.split("; waiting: ", 1)[1]
        assert waiting.startswith("task in main() at test_virtual_time_default_limit.py:"), text
        assert "heartbeat" not in waiting and "guarded" not in waiting, text


def test_a_lent_timing_goes_back_and_leaves_nothing_charged():
    """VirtualEventLoop._lend_timing/_return_timing (what --timing-fuzz does
    to a loop made before the test): only to a loop that is open, not
    running and has no Timing; once given back, the handles and timer
    callbacks it wrapped run uncharged, and the collector is released."""
    import asyncio
    import gc

    from pywheel import testing

    # quantum=0: exact readings, so "uncharged" reads as "at its own time"
    loop = testing.VirtualEventLoop(quantum=0)
    try:
        seen = []
        timing = testing.Timing(max_cost=0.002, max_late=0.003, draw=lambda n: n)
        loop._lend_timing(timing)
        with pytest.raises(RuntimeError, match="has none"):
            loop._lend_timing(testing.Timing(max_cost=0.001))
        loop.call_later(5, lambda: seen.append(("timer", loop.time())))  # wrapped, charged
        loop.call_soon(lambda: seen.append(("soon", loop.time())))  # a charged handle
        loop.run_until_complete(asyncio.sleep(0))  # runs the ready one, charged
        assert not gc.isenabled()
        assert loop.time() > 0 and loop.timing is timing
        t0 = loop.time()
        loop.call_soon(lambda: seen.append(("left", loop.time())))  # charged handle, queued
        loop._return_timing()
        assert loop.timing is None and gc.isenabled() and "call_at" not in vars(loop)
        loop.run_until_complete(asyncio.sleep(10))
        # Given back: the queued handle and the wrapped timer ran at their own time.
        assert ("left", t0) in seen and ("timer", 5.0) in seen, seen
        assert loop.time() == t0 + 10
        assert not timing._owner and timing.decisions  # it recorded, and let go
    finally:
        loop.close()
    with pytest.raises(RuntimeError, match="open, not running"):
        loop._lend_timing(testing.Timing(max_cost=0.001))


THREAD = """
import asyncio, threading

def test_loop_on_another_thread():
    result = []

    def serve():
        try:
            result.append(asyncio.run(asyncio.sleep(8000, "served")))
        except Exception as exc:
            result.append(type(exc).__name__)

    t = threading.Thread(target=serve)
    t.start()
    t.join(30)
    assert result == ["served"], result
"""


def test_a_loop_on_another_thread_gets_only_a_limit_asked_for(tmp_path):
    """The default is for the loop a test waits on: a server or portal loop
    on a thread of its own would die of it and take its service along."""
    files = {"test_t.py": THREAD}
    r = _pytest(tmp_path, files, "--virtual-time")
    assert "1 passed" in r.stdout, r.stdout + r.stderr
    r = _pytest(tmp_path, files, "--virtual-time", "--virtual-time-limit=7200")
    assert "1 failed" in r.stdout and "TimeLimitError" in r.stdout, r.stdout + r.stderr
