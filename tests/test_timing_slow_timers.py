"""pywheel.testing: under a Timing with max_cost, the program's timer
callbacks take virtual time as ready callbacks do (asyncio's own, a sleep's
wake-up, do not: the step they wake does), so a timer that falls due while
a batch of timers runs waits for the next iteration, after the task steps
that batch woke -- the order of a punctual real loop whose callbacks take
time.  The wrapper that charges it leaves the handle's surface alone."""

import asyncio
import functools
import os

import pytest

from pywheel import testing as vt

HERE = os.path.basename(__file__)


def every_decision(ticks):
    return lambda n: min(ticks, n)


def test_timer_due_during_a_batch_runs_after_the_step_the_batch_woke():
    """A's callback (the program's: it hands T a result) runs at t0+1.0 and
    takes 2 ms; B (t0+1.001) falls due meanwhile.  A real loop sets B aside
    only at the next iteration, after T's step was made ready: T runs
    first, and sees a clock past B's deadline."""
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        def a(fut):
            fut.set_result("answer")

        async def t():
            fut = loop.create_future()
            loop.call_later(1.0, a, fut)
            b = loop.call_later(1.001, lambda: seen.append(("B", loop.time())))
            await fut
            seen.append(("T", loop.time(), b.when()))

        await asyncio.create_task(t())
        await asyncio.sleep(0.1)

    timing = vt.Timing(max_cost=0.002, draw=every_decision(2))
    vt.run(main(), timing=timing)
    assert [e[0] for e in seen] == ["T", "B"]
    (_, t_time, b_when), (_, b_time) = seen
    assert t_time >= b_when  # B was due when T's step ran, and waited for it
    assert b_time >= b_when  # never early
    timers = [d for d in timing.decisions if d[0] == "timer"]
    assert [site for *_, site in timers][:1] == [
        "test_timer_due_during_a_batch_runs_after_the_step_the_batch_woke.<locals>.main.<locals>.a()"
    ]


def test_late_wake_up_still_runs_both_timers_in_one_batch_first():
    """A loop that overslept past both deadlines runs both timers in one
    batch, in deadline order, before the step the first one woke."""
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        async def t():
            fut = loop.create_future()
            loop.call_later(1.0, fut.set_result, None)
            loop.call_later(1.001, lambda: seen.append("B"))
            await fut
            seen.append("T")

        await asyncio.create_task(t())
        await asyncio.sleep(0.1)

    vt.run(main(), timing=vt.Timing(max_late=0.002, draw=every_decision(2)))
    assert seen == ["B", "T"]


def test_asyncio_own_timers_cost_nothing_the_step_they_wake_does():
    """A sleep's wake-up and asyncio.timeout's expiry only resolve a future
    or cancel a task: no decision for them; the step they wake is charged."""

    async def sleeper():
        await asyncio.sleep(0.5)
        async with asyncio.timeout(0.1):
            await asyncio.sleep(1.0)

    async def main():
        with pytest.raises(TimeoutError):
            await asyncio.create_task(sleeper(), name="napper")

    timing = vt.Timing(max_cost=0.003, draw=every_decision(3))
    vt.run(main(), timing=timing)
    assert timing.decisions
    assert [d for d in timing.decisions if d[0] == "timer"] == [], repr(timing)
    line = sleeper.__code__.co_firstlineno + 1  # the step the sleep woke, at t=0.503
    assert f"step of task 'napper' in sleeper() at {HERE}:{line} at t=0.503" in repr(timing), [
        d for d in timing.decisions if "napper" in d[3]
    ]


def test_timer_costs_name_the_callback_and_replay():
    def ping():
        pass

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, ping)
        loop.call_later(0.2, functools.partial(ping))
        await asyncio.sleep(0.3)

    timing = vt.Timing(max_cost=0.001, draw=every_decision(1))
    vt.run(main(), timing=timing, quantum=0)  # exact readings: the deadlines as given
    name = "test_timer_costs_name_the_callback_and_replay.<locals>.ping()"
    sites = [(t, secs, site) for kind, t, secs, site in timing.decisions if kind == "timer"]
    assert sites == [(0.1, 0.001, name), (0.2, 0.001, name)]
    assert f"2 timers of {name} at t=0.1..0.2 took 1 ms each" in repr(timing)
    first = timing.decisions
    vt.run(main(), timing=timing, quantum=0)  # replays exactly
    assert timing.decisions == first


# ---- the charged handle looks like the plain one ----------------------------


def test_charged_timer_handle_reads_as_the_plain_one():
    def cb():
        pass

    for timing in (None, vt.Timing(max_cost=0.002, draw=every_decision(1))):
        loop = vt.VirtualEventLoop(timing=timing)
        try:
            h1 = loop.call_at(5.0, cb)
            h2 = loop.call_at(5.0, cb)
            assert repr(h1) == f"<pywheel.TimerHandle pending when=5.0 callback={cb!r}>"
            assert h1 == h2 and hash(h1) == hash(h2)
        finally:
            loop.close()


@pytest.mark.parametrize("debug", [False, True])
def test_charged_loop_still_refuses_what_the_plain_loop_refuses(debug):
    async def coro_fn():
        pass

    loop = vt.VirtualEventLoop(timing=vt.Timing(max_cost=0.002, draw=every_decision(1)))
    loop.set_debug(debug)
    try:
        with pytest.raises(TypeError):
            loop.call_later(1.0, "not callable")
        if debug:
            with pytest.raises(TypeError, match="coroutines cannot be used"):
                loop.call_later(1.0, coro_fn)
        assert len(loop.wheel) == 0
    finally:
        loop.close()


@pytest.mark.parametrize("debug", [False, True])
def test_an_error_in_a_charged_timer_is_reported_and_the_loop_goes_on(debug):
    errors = []

    def boom():
        raise ValueError("boom")

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        loop.set_debug(debug)
        loop.call_later(0.1, boom)
        await asyncio.sleep(0.2)
        return loop.time()

    end = vt.run(main(), timing=vt.Timing(max_cost=0.002, draw=every_decision(2)))
    assert end >= 0.2
    assert len(errors) == 1 and isinstance(errors[0]["exception"], ValueError)
