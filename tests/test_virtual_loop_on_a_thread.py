"""A loop on a thread of its own (a server or a portal in a thread, fed and
stopped by the main thread through ``call_soon_threadsafe``) waits when it
has nothing to do, as the stock loop does, instead of dying with a
``DeadlockError`` while the test still uses it.

The shape behind issue 27's finding 12: aiosmtplib's suite starts aiosmtpd's
``Controller`` (a loop running forever on a thread); on virtual time that
loop died with ``DeadlockError`` once its connections were gone, and
pytest's thread-exception hook formatted that traceback in the dying thread
while the main thread formatted a test failure.  On CPython 3.11 (3.11.7
here) the AST constructor keeps its recursion counter in state shared by
threads (CPython gh-106905), and hypothesis's ``gc.callbacks`` let the two
threads switch inside it: ``INTERNALERROR> SystemError: AST constructor
recursion depth mismatch``, the session lost.  The race is CPython's; the
dead server thread was pywheel's, and these tests check it is gone, with
the stock loop as the oracle."""

import asyncio
import threading
import time

import pytest
from helpers import run_pytest

from pywheel import testing


def _loops():
    return [
        pytest.param(asyncio.new_event_loop, id="stock"),
        pytest.param(testing.new_event_loop, id="virtual"),
    ]


@pytest.mark.parametrize("make", _loops())
def test_a_loop_running_forever_on_a_thread_waits_for_the_main_thread(make):
    loop = make()
    errors = []

    def serve():
        try:
            loop.run_forever()
        except BaseException as exc:  # what killed the thread
            errors.append(exc)

    t = threading.Thread(target=serve)
    t.start()
    try:
        time.sleep(0.3)  # idle, longer than the last-chance wait (0.05 s)

        async def job():
            await asyncio.sleep(0.01)
            return "done"

        fut = asyncio.run_coroutine_threadsafe(job(), loop)
        assert fut.result(timeout=10) == "done"
        time.sleep(0.1)  # idle again
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
    assert not t.is_alive()
    loop.close()
    assert errors == []


@pytest.mark.parametrize("make", _loops())
def test_a_portal_on_a_thread_waits_for_the_main_thread_to_stop_it(make):
    """run_until_complete on a thread, awaiting an event only the main
    thread sets (anyio's blocking portal's shape)."""
    ready = threading.Event()
    box = {}

    def portal():
        async def main():
            box["loop"] = asyncio.get_running_loop()
            box["stop"] = stop = asyncio.Event()
            ready.set()
            await stop.wait()
            return "stopped"

        try:
            with asyncio.Runner(loop_factory=make) as runner:
                box["result"] = runner.run(main())
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=portal)
    t.start()
    assert ready.wait(10)
    time.sleep(0.3)
    box["loop"].call_soon_threadsafe(box["stop"].set)
    t.join(10)
    assert not t.is_alive()
    assert box.get("error") is None
    assert box["result"] == "stopped"


def test_a_real_deadlock_on_the_main_thread_is_still_reported():
    async def main():
        await asyncio.get_running_loop().create_future()

    with pytest.raises(testing.DeadlockError):
        testing.run(main())


SERVER_SUITE = """
import asyncio, threading, time
import pytest

@pytest.fixture
def server():
    # A server in a thread, as aiosmtpd's Controller runs one: its loop
    # runs forever and the fixture stops it from the main thread.
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def serve():
        srv = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        started.set()
        return srv

    def run():
        loop.run_until_complete(serve())
        loop.run_forever()

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(10)
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)
    loop.close()

def test_fails_while_the_server_idles(server):
    time.sleep(0.3)
    assert type(server).__name__ == "VirtualEventLoop"
    assert 1 == 2

def test_after(server):
    time.sleep(0.1)
"""

#: An exception that ends a thread fails the session instead of a warning.
_THREAD_WARNING_IS_AN_ERROR = "error::pytest.PytestUnhandledThreadExceptionWarning"


def test_a_failure_beside_a_server_thread_is_reported_with_nothing_else(tmp_path):
    r = run_pytest(
        tmp_path,
        {"test_server.py": SERVER_SUITE},
        "--virtual-time",
        "-W",
        _THREAD_WARNING_IS_AN_ERROR,
    )
    out = r.stdout + r.stderr
    assert "INTERNALERROR" not in out, out
    assert "DeadlockError" not in out, out
    assert "Exception in thread" not in out, out
    assert r.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
