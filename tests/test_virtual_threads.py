"""Work on other threads on virtual time (issue 20, point 1): the clock does
not run ahead of an executor / to_thread job or a testing.outside() block (a
0.3 s real job beats a 1 s virtual timeout, every run), and a thread the
program started that may still deliver (call_soon_threadsafe) is no
DeadlockError while it lives."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pywheel import testing as vt

RUNS = 5


def _work(seconds: float) -> str:
    time.sleep(seconds)
    return "result"


@pytest.mark.parametrize("how", ["to_thread", "run_in_executor"])
def test_a_thread_job_beats_a_longer_virtual_timeout(how):
    async def main():
        loop = asyncio.get_running_loop()
        if how == "to_thread":
            job = asyncio.to_thread(_work, 0.3)
        else:
            job = loop.run_in_executor(None, _work, 0.3)
        async with asyncio.timeout(1.0):
            got = await job
        return got, loop.time()

    for _ in range(RUNS):
        got, t = vt.run(main())
        # On main: TimeoutError (the clock jumped to the timeout after 50 ms).
        assert got == "result" and t < 1.0


def test_a_plain_thread_under_outside_beats_a_longer_virtual_timeout():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def worker():
            loop.call_soon_threadsafe(fut.set_result, _work(0.3))

        with vt.outside():
            threading.Thread(target=worker).start()
            async with asyncio.timeout(1.0):
                return await fut

    for _ in range(RUNS):
        assert vt.run(main()) == "result"


def test_outside_from_another_thread_with_the_loop():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        entered = threading.Event()

        def worker():
            with vt.outside(loop):
                entered.set()
                time.sleep(0.3)
                loop.call_soon_threadsafe(fut.set_result, "late but first")

        threading.Thread(target=worker).start()
        await asyncio.to_thread(entered.wait, 10)  # declared before the timeout starts
        async with asyncio.timeout(1.0):
            return await fut

    assert vt.run(main()) == "late but first"


def test_no_deadlock_error_while_a_thread_that_may_deliver_lives():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def worker():  # longer than the loop's last-chance wait (<= 1 s)
            time.sleep(1.3)
            loop.call_soon_threadsafe(fut.set_result, 7)

        threading.Thread(target=worker).start()
        return await fut  # no timer pending

    # On main: DeadlockError after the 50 ms last-chance wait.
    assert vt.run(main()) == 7


def test_a_real_deadlock_is_still_reported_once_the_thread_ended():
    async def main():
        loop = asyncio.get_running_loop()
        th = threading.Thread(target=time.sleep, args=(0.1,))
        th.start()
        await loop.create_future()  # nobody will ever set it

    with pytest.raises(vt.DeadlockError):
        vt.run(main())


def test_outside_waits_with_no_timer_and_never_deadlocks():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with vt.outside():
            threading.Timer(1.2, loop.call_soon_threadsafe, (fut.set_result, "ok")).start()
            return await fut

    assert vt.run(main(), autojump_threshold=0.01) == "ok"


def test_outside_is_a_no_op_on_other_loops_and_checks_its_use():
    async def main():
        with vt.outside():
            await asyncio.sleep(0)
        block = vt.outside()
        with block:
            with pytest.raises(RuntimeError):
                block.__enter__()
        return True

    assert asyncio.run(main())
    with pytest.raises(RuntimeError):
        vt.outside()  # no running loop, no loop given


def test_after_the_work_the_clock_jumps_again():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(_work, 0.05)
        t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
        await asyncio.sleep(3600)  # nothing outstanding now: at once
        return loop.time(), time.clock_gettime(time.CLOCK_MONOTONIC) - t0

    t, real = vt.run(main())
    assert 3600.0 < t < 3600.001 and real < 30  # and a few 10 µs iterations


def test_a_new_thread_is_seen_after_an_older_one_ended():
    # The loop knows the threads alive when it first ran; one of them ends,
    # then the program starts another (which may reuse its ident).
    older = threading.Thread(target=time.sleep, args=(0.2,))
    older.start()

    async def main():
        loop = asyncio.get_running_loop()
        while older.is_alive():
            await asyncio.sleep(0.01)
        fut = loop.create_future()

        def worker():
            time.sleep(1.3)
            loop.call_soon_threadsafe(fut.set_result, "seen")

        threading.Thread(target=worker).start()
        return await fut

    assert vt.run(main()) == "seen"


def test_an_anyio_thread_job_beats_a_longer_virtual_timeout():
    # anyio's to_thread.run_sync runs on anyio's own workers, not through
    # run_in_executor: before, the clock jumped to the 1 s deadline after
    # autojump_threshold while the 0.3 s job still ran (the task read
    # t >= 1.0 after it: a real clock reads 0.3).
    anyio = pytest.importorskip("anyio")

    async def main():
        with anyio.fail_after(1.0):
            got = await anyio.to_thread.run_sync(_work, 0.3)
        start = anyio.current_time()
        await anyio.sleep(100)  # the worker now idles: the clock jumps again
        return got, start, anyio.current_time()

    for _ in range(RUNS):
        t0 = time.clock_gettime(time.CLOCK_MONOTONIC)  # real: time.monotonic is virtual
        got, start, end = anyio.run(
            main, backend="asyncio", backend_options={"loop_factory": vt.new_event_loop}
        )
        assert got == "result" and start < 1.0
        assert end - start == pytest.approx(100, abs=0.01)
        # An idle worker is not held for (a threshold wait, then the jump).
        assert time.clock_gettime(time.CLOCK_MONOTONIC) - t0 < 10
