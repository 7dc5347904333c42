"""pywheel.testing: under a Timing with max_cost, a timer's callback takes
virtual time as a ready callback does, so a timer that falls due while a
batch of timers runs waits for the next iteration, after the task steps
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
    """T's sleep timer runs at t0+1.0 and takes 2 ms; B (t0+1.001) falls due
    meanwhile.  A real loop set B aside only at the next iteration, after
    T's step was ready: T runs first, and sees a clock past B's deadline."""
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        async def t():
            b = loop.call_later(1.001, lambda: seen.append(("B", loop.time())))
            await asyncio.sleep(1.0)
            seen.append(("T", loop.time(), b.when()))

        await asyncio.create_task(t())
        await asyncio.sleep(0.1)

    timing = vt.Timing(max_cost=0.002, draw=every_decision(2))
    vt.run(main(), timing=timing)
    assert [e[0] for e in seen] == ["T", "B"]
    (_, t_time, b_when), (_, b_time) = seen
    assert t_time >= b_when  # B was due when T's step ran, and waited for it
    assert b_time >= b_when  # never early
    kinds = {kind for kind, *_ in timing.decisions}
    assert "timer" in kinds


def test_late_wake_up_still_runs_both_timers_in_one_batch_first():
    """A loop that overslept past both deadlines runs both timers in one
    batch, in deadline order, before the step the first one woke."""
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        async def t():
            loop.call_later(1.001, lambda: seen.append("B"))
            await asyncio.sleep(1.0)
            seen.append("T")

        await asyncio.create_task(t())
        await asyncio.sleep(0.1)

    vt.run(main(), timing=vt.Timing(max_late=0.002, draw=every_decision(2)))
    assert seen == ["B", "T"]


def test_timer_costs_are_named_by_the_task_that_scheduled_them_and_replay():
    async def sleeper():
        await asyncio.sleep(0.5)

    async def main():
        await asyncio.create_task(sleeper(), name="napper")

    timing = vt.Timing(max_cost=0.003, draw=every_decision(3))
    vt.run(main(), timing=timing)
    line = sleeper.__code__.co_firstlineno + 1
    site = f"task 'napper' in sleeper() at {HERE}:{line}"
    # main's step and napper's first step took 3 ms each before the sleep.
    timers = [d for d in timing.decisions if d[0] == "timer"]
    assert timers == [("timer", 0.503, 0.003, site)]
    assert f"a timer of {site} at t=0.503 took 0.003" in repr(timing)
    first = timing.decisions
    vt.run(main(), timing=timing)  # replays exactly
    assert timing.decisions == first


def test_a_plain_timer_callback_is_named_by_its_callback():
    def ping():
        pass

    async def main():
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, ping)
        loop.call_later(0.2, functools.partial(ping))
        async with asyncio.timeout(0.3):
            await asyncio.sleep(1.0)

    timing = vt.Timing(max_cost=0.001, draw=every_decision(1))
    with pytest.raises(TimeoutError):
        vt.run(main(), timing=timing)
    line = main.__code__.co_firstlineno + 5  # where main waits
    sites = [(t, site) for kind, t, _s, site in timing.decisions if kind == "timer"]
    assert sites == [
        (0.1, "test_a_plain_timer_callback_is_named_by_its_callback.<locals>.ping()"),
        (0.2, "test_a_plain_timer_callback_is_named_by_its_callback.<locals>.ping()"),
        (0.3, f"task in main() at {HERE}:{line}"),  # asyncio's timeout: the task
    ]


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
