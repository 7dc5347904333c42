"""pywheel.asyncio, with the stock loop as the reference (uvloop's habit).

Every loop test runs on asyncio's own selector loop and on WheelEventLoop and
must behave the same; the helpers run on the stock loop (through the shared
threaded wheel), on WheelEventLoop (its own wheel) and on uvloop if present.
"""

import asyncio
import contextlib
import contextvars
import gc
import sys
import time

import pytest

import pywheel
import pywheel.asyncio as pwa

try:
    import uvloop
except ImportError:  # an optional benchmark extra
    uvloop = None

LOOPS = {"stock": asyncio.SelectorEventLoop, "wheel": pwa.WheelEventLoop}
HELPER_LOOPS = dict(LOOPS)
if uvloop is not None:
    HELPER_LOOPS["uvloop"] = uvloop.new_event_loop


@pytest.fixture(params=list(LOOPS))
def run(request):
    """run(coro_fn) runs coro_fn() on a fresh loop of the kind under test."""
    factory = LOOPS[request.param]

    def runner(main, debug=False):
        with asyncio.Runner(loop_factory=factory, debug=debug) as r:
            return r.run(main())

    runner.kind = request.param
    return runner


@pytest.fixture(params=list(HELPER_LOOPS))
def hrun(request):
    factory = HELPER_LOOPS[request.param]

    def runner(main):
        with asyncio.Runner(loop_factory=factory) as r:
            return r.run(main())

    runner.kind = request.param
    return runner


# ---- the loop ----------------------------------------------------------------


# Uses asyncio's policy system on purpose: deprecated from Python 3.14.
@pytest.mark.filterwarnings("ignore:.*polic:DeprecationWarning")
def test_loop_kinds():
    loop = pwa.new_event_loop()
    try:
        assert isinstance(loop, pwa.WheelEventLoop)
        assert isinstance(loop, asyncio.SelectorEventLoop)
    finally:
        loop.close()
    assert isinstance(pwa.EventLoopPolicy().new_event_loop(), pwa.WheelEventLoop)

    async def kind():
        return type(asyncio.get_running_loop())

    assert pwa.run(kind()) is pwa.WheelEventLoop


# Uses asyncio's policy system on purpose: deprecated from Python 3.14.
@pytest.mark.filterwarnings("ignore:.*polic:DeprecationWarning")
def test_policy_makes_asyncio_run_use_the_wheel_loop():
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(pwa.EventLoopPolicy())
    try:

        async def kind():
            return type(asyncio.get_running_loop())

        assert asyncio.run(kind()) is pwa.WheelEventLoop
    finally:
        asyncio.set_event_loop_policy(old)


def test_call_later_order_and_never_early(run):
    async def main():
        loop = asyncio.get_running_loop()
        got = []
        done = loop.create_future()
        t0 = loop.time()
        delays = [0.03, 0.01, 0.02, 0.01, 0.0, 0.025]
        for i, d in enumerate(delays):
            loop.call_later(d, lambda i=i, d=d: got.append((i, loop.time() - t0 >= d)))
        loop.call_later(0.05, done.set_result, None)
        await done
        return got

    got = run(main)
    assert [i for i, _ in got] == [4, 1, 3, 2, 5, 0]
    assert all(ok for _, ok in got)


def test_call_at_handles(run):
    async def main():
        loop = asyncio.get_running_loop()
        ran = []
        h1 = loop.call_at(loop.time() + 0.01, ran.append, 1)
        h2 = loop.call_later(0.01, ran.append, 2)
        assert abs(h1.when() - (loop.time() + 0.01)) < 0.01
        assert not h2.cancelled()
        h2.cancel()
        assert h2.cancelled()
        if hasattr(asyncio.TimerHandle, "get_context"):  # asyncio has it from 3.12
            assert isinstance(h1.get_context(), contextvars.Context)
        await asyncio.sleep(0.03)
        return ran

    assert run(main) == [1]


def test_bad_arguments_as_stock(run):
    async def main():
        loop = asyncio.get_running_loop()
        with pytest.raises(TypeError):
            loop.call_later(None, print)
        with pytest.raises(TypeError):
            loop.call_at(None, print)

    run(main)


def test_sleep_wait_for_timeout(run):
    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await asyncio.sleep(0.02, "r") == "r"
        assert loop.time() - t0 >= 0.02
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(5), 0.02)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02):
                await asyncio.sleep(5)
        async with asyncio.timeout(5) as cm:
            await asyncio.sleep(0)
        assert not cm.expired()
        return loop.time() - t0

    assert run(main) < 3


def test_task_cancellation_cancels_its_sleep_timer(run):
    async def main():
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(asyncio.sleep(30))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        if isinstance(loop, pwa.WheelEventLoop):
            assert len(loop.wheel) == 0

    run(main)


def test_timer_exception_goes_to_loop_handler(run):
    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        loop.set_exception_handler(lambda lp, ctx: seen.append(ctx))

        def boom():
            raise ZeroDivisionError

        ran_after = []
        loop.call_later(0.001, boom)
        loop.call_later(0.002, ran_after.append, 1)
        await asyncio.sleep(0.02)
        return seen, ran_after

    seen, ran_after = run(main)
    assert ran_after == [1]
    assert len(seen) == 1
    assert isinstance(seen[0]["exception"], ZeroDivisionError)
    assert "Exception in callback" in seen[0]["message"]
    assert "handle" in seen[0]


VAR = contextvars.ContextVar("VAR", default="unset")


def test_timer_runs_in_the_scheduling_context(run):
    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        VAR.set("task")
        loop.call_later(0.001, lambda: seen.append(VAR.get()))
        ctx = contextvars.Context()
        ctx.run(VAR.set, "explicit")
        loop.call_later(0.001, lambda: seen.append(VAR.get()), context=ctx)
        await asyncio.sleep(0.02)
        return sorted(seen)

    assert run(main) == ["explicit", "task"]


def test_keyboard_interrupt_in_a_timer_propagates(run):
    async def main():
        loop = asyncio.get_running_loop()

        def interrupt():
            raise KeyboardInterrupt

        loop.call_later(0.001, interrupt)
        await asyncio.sleep(1)

    with pytest.raises(KeyboardInterrupt):
        run(main)


def test_debug_mode_works(run):
    async def main():
        loop = asyncio.get_running_loop()
        assert loop.get_debug()
        with pytest.raises(TypeError):  # debug mode refuses coroutine functions
            loop.call_later(0.01, main)
        await asyncio.sleep(0.01)

    run(main, debug=True)


def test_zero_delay_timer_loop_does_not_starve_io(run):
    # A timer that keeps rescheduling itself at zero delay must leave room
    # for the rest of the loop, as on the stock loop.
    async def main():
        loop = asyncio.get_running_loop()
        spins = 0

        def spin():
            nonlocal spins
            spins += 1
            loop.call_later(0, spin)

        loop.call_later(0, spin)
        t0 = time.monotonic()
        await asyncio.sleep(0.05)  # must come back although spin never stops
        return spins, time.monotonic() - t0

    spins, elapsed = run(main)
    assert spins > 10 and elapsed < 5


def test_close_cancels_pending_timers():
    loop = pwa.WheelEventLoop()
    h = loop.call_later(10, print)
    assert len(loop.wheel) == 1
    loop.close()
    assert h.cancelled()
    with pytest.raises(RuntimeError):
        loop.call_later(1, print)


def test_idle_loop_sleeps_until_the_next_timer():
    # The selector is asked to sleep until the wheel's next deadline, so a
    # loop with one far timer wakes up a handful of times, not each tick.
    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(3600, print)
        wakes = 0
        real = loop._selector.select

        def counting(timeout=None):
            nonlocal wakes
            wakes += 1
            return real(timeout)

        loop._selector.select = counting
        await asyncio.sleep(0.2)
        return wakes

    assert pwa.run(main()) < 10


def test_server_shaped_load_leaves_nothing_behind(run):
    # Many concurrent tasks, each with a timeout that is almost always
    # cancelled: afterwards no timer is pending and the counts add up.
    async def main():
        loop = asyncio.get_running_loop()

        async def request(i):
            async with asyncio.timeout(5 if i % 100 else 0.001):
                await asyncio.sleep(0 if i % 100 else 1)

        results = await asyncio.gather(*[request(i) for i in range(3000)], return_exceptions=True)
        timeouts = sum(isinstance(r, TimeoutError) for r in results)
        if isinstance(loop, pwa.WheelEventLoop):
            s = loop.wheel.stats()
            assert len(loop.wheel) == 0
            assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
        return timeouts

    assert run(main) == 30


# ---- the helpers on any loop ---------------------------------------------------


def test_helper_sleep(hrun):
    async def main():
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        assert await pwa.sleep(0.02, "x") == "x"
        assert time.monotonic() - t0 >= 0.02 - 0.001  # uvloop's clock is ms-granular
        assert await pwa.sleep(0) is None
        assert await pwa.sleep(-1, 5) == 5
        task = asyncio.ensure_future(pwa.sleep(30))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return loop

    hrun(main)


def test_helper_timeout_expires(hrun):
    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(TimeoutError):
            async with pwa.timeout(0.02) as cm:
                await asyncio.sleep(5)
        assert cm.expired()
        assert loop.time() - t0 >= 0.019
        assert repr(cm) == "<Timeout [expired]>"

    hrun(main)


def test_helper_timeout_not_expired_and_reschedule(hrun):
    async def main():
        loop = asyncio.get_running_loop()
        async with pwa.timeout(None) as cm:
            assert cm.when() is None
            assert repr(cm) == "<Timeout [active] when=None>"
            cm.reschedule(loop.time() + 5)
            await asyncio.sleep(0)
        assert not cm.expired()
        assert repr(cm) == "<Timeout [finished]>"
        with pytest.raises(TimeoutError):
            async with pwa.timeout(5) as cm2:
                cm2.reschedule(loop.time() + 0.01)
                await asyncio.sleep(5)
        with pytest.raises(RuntimeError, match="Cannot change state of expired Timeout"):
            cm2.reschedule(None)
        fresh = pwa.timeout(1)
        with pytest.raises(RuntimeError, match="has not been entered"):
            fresh.reschedule(None)

    hrun(main)


def test_helper_timeout_at_in_the_past_expires_at_once(hrun):
    async def main():
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with pwa.timeout_at(loop.time() - 1):
                await asyncio.sleep(5)

    hrun(main)


def test_helper_timeout_lets_other_cancellations_through(hrun):
    async def main():
        async def inner():
            async with pwa.timeout(5):
                await asyncio.sleep(5)

        task = asyncio.ensure_future(inner())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        # nested: the inner expiry is the inner block's TimeoutError only
        async with pwa.timeout(5) as outer:
            with pytest.raises(TimeoutError):
                async with pwa.timeout(0.01):
                    await asyncio.sleep(5)
        assert not outer.expired()

    hrun(main)


def test_helper_timeout_misuse(hrun):
    async def main():
        cm = pwa.timeout(1)
        async with cm:
            pass
        with pytest.raises(RuntimeError, match="already been entered"):
            async with cm:
                pass

    hrun(main)


def test_helper_timeout_matches_asyncio_timeout(hrun):
    # The same scenarios through asyncio.timeout and pwa.timeout: same outcome.
    async def scenario(factory, delay, work):
        try:
            async with factory(delay) as cm:
                await asyncio.sleep(work)
            return ("ok", cm.expired())
        except TimeoutError:
            return ("timeout", cm.expired())

    async def main():
        out = []
        for delay, work in [(0.01, 0.2), (0.2, 0.0), (None, 0.01), (0, 0.05), (-1, 0)]:
            a = await scenario(asyncio.timeout, delay, work)
            b = await scenario(pwa.timeout, delay, work)
            out.append((a, b))
        return out

    for a, b in hrun(main):
        assert a == b


def test_bridge_delivers_a_batch_with_one_threadsafe_call():
    # 500 timeouts due together on the stock loop: the shared wheel fires them
    # in one batch and the loop is woken once (or a handful of times), not
    # once per timer.  A deadline already past when a timeout is armed is
    # handled on the loop without the thread (no threadsafe call at all): a
    # loaded machine that took longer than the head start to arm them all
    # tries again with the head start doubled.
    async def main(margin):
        loop = asyncio.get_running_loop()
        calls = 0
        real = loop.call_soon_threadsafe

        def counting(*a, **k):
            nonlocal calls
            calls += 1
            return real(*a, **k)

        loop.call_soon_threadsafe = counting
        when = loop.time() + margin  # one deadline for all: one batch
        armed_late = False

        async def request():
            nonlocal armed_late
            with contextlib.suppress(TimeoutError):
                async with pwa.timeout_at(when):
                    armed_late |= loop.time() >= when
                    await asyncio.sleep(5)

        await asyncio.gather(*[request() for _ in range(500)])
        return calls, armed_late

    margin = 0.05
    for _ in range(5):
        calls, armed_late = asyncio.run(main(margin))
        if not armed_late:
            break
        margin *= 2
    assert not armed_late, f"could not arm 500 timeouts within {margin / 2}s"
    assert 1 <= calls <= 20, calls


def test_bridge_survives_a_closed_loop():
    errors = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: errors.append(u)
    try:
        loop = asyncio.new_event_loop()

        async def arm():
            return pwa.timeout(0.02)

        cm = loop.run_until_complete(arm())
        loop.run_until_complete(_enter_and_leave_armed(cm))
        loop.close()  # its timer is still armed on the shared wheel
        time.sleep(0.1)
        wheel = pwa._bridge.wheel()
        assert wheel.stats()["errors"] == 0
    finally:
        sys.unraisablehook = old
    assert errors == []


async def _enter_and_leave_armed(cm):
    # Enter the timeout and leave the task without exiting it: the timer
    # stays armed when the loop closes.
    async def body():
        await cm.__aenter__()

    await asyncio.ensure_future(body())


def test_bridge_timers_return_to_zero():
    async def main():
        async def request(i):
            async with pwa.timeout(5):
                await asyncio.sleep(0)

        await asyncio.gather(*[request(i) for i in range(2000)])

    asyncio.run(main())
    wheel = pwa._bridge.wheel()
    deadline = time.monotonic() + 5
    while len(wheel) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(wheel) == 0
    s = wheel.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]


def test_loop_garbage_is_collected():
    loop = pwa.WheelEventLoop()
    loop.call_later(10, loop.stop)  # a cycle through the loop's own wheel
    loop.close()
    del loop
    gc.collect()
    # nothing to assert beyond "no crash": the wheel was closed with the loop
    assert isinstance(pywheel.ManualWheel(), pywheel.Wheel)
