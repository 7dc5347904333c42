"""pywheel.testing timing fuzz: Timing decisions, replay, repr, bad input,
draws that end the run, and the properties every real loop keeps."""

import asyncio
import math
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import StopTest

from pywheel import testing as vt


def seeded(seed, p=0.5, **bounds):
    r = random.Random(seed)
    return vt.Timing(draw=lambda n: r.randint(0, n) if r.random() < p else 0, **bounds)


def busy_program(trace):
    """Tasks, timers, call_soon chains, timeouts and outside events."""

    async def main():
        loop = asyncio.get_running_loop()

        def mark(name):
            trace.append((loop.time(), name))

        async def worker(name, delays):
            for d in delays:
                await asyncio.sleep(d)
                mark(name)
                await asyncio.sleep(0)

        async def remote():
            return await vt.latency(0.05, "answer")

        for i in range(5):
            loop.call_later(0.01 * i, mark, f"timer{i}")
        vt.call_external(0.02, mark, "external")
        ws = [asyncio.create_task(worker(f"w{i}", [0.01 * (i + 1)] * 4)) for i in range(3)]
        try:
            mark(await asyncio.wait_for(remote(), 0.06))
        except TimeoutError:
            mark("timeout")
        await asyncio.gather(*ws)
        return loop.time()

    return main()


# ---- Timing objects -----------------------------------------------------------


@pytest.mark.parametrize("name", ["max_late", "max_cost", "max_jitter"])
@pytest.mark.parametrize("value", [-0.001, math.nan, math.inf, -math.inf])
def test_bad_bounds_raise_value_error_at_creation(name, value):
    with pytest.raises(ValueError, match=name):
        vt.timings(**{name: value})
    with pytest.raises(ValueError, match=name):
        vt.Timing(**{name: value})


@pytest.mark.parametrize("value", [None, "0.1", True])
def test_bad_bound_types_raise_type_error(value):
    with pytest.raises(TypeError):
        vt.timings(max_late=value)


def test_replay_is_exact_and_does_not_draw_again():
    timing = seeded(1, max_late=0.005, max_cost=0.002, max_jitter=0.02)
    first, again = [], []
    end1 = vt.run(busy_program(first), timing=timing)
    assert not timing.punctual
    timing._draw = None  # a replay that drew would now be punctual
    end2 = vt.run(busy_program(again), timing=timing)
    assert (end1, first) == (end2, again)
    punctual = []
    vt.run(busy_program(punctual))
    assert punctual != first


def test_repr_names_only_the_non_zero_decisions():
    timing = vt.Timing(max_late=0.005)
    assert repr(timing) == "Timing(max_late=0.005)"
    vt.run(asyncio.sleep(1), timing=timing)
    assert repr(timing) == "Timing(max_late=0.005: punctual)"

    async def renew():
        await asyncio.sleep(9.998)

    timing = vt.Timing(max_late=0.005, draw=lambda n: 2)
    vt.run(renew(), timing=timing, quantum=0)  # exact readings: the deadline is 9.998
    line = renew.__code__.co_firstlineno + 1
    assert repr(timing) == (
        "Timing(max_late=0.005: woke 2 ms late for the deadline t=9.998 "
        f"(task in renew() at test_testing_timing.py:{line}))"
    )
    assert timing.decisions == [("wake", 9.998, 0.002, timing.decisions[0][3])]


def test_decisions_are_whole_ticks_and_never_early():
    timing = seeded(7, p=1.0, max_late=0.0105, max_cost=0.0037, max_jitter=0.02)
    vt.run(busy_program([]), timing=timing, tick=0.001)
    assert timing.decisions
    for kind, _t, secs, _site in timing.decisions:
        ticks = secs / 0.001
        assert abs(ticks - round(ticks)) < 1e-9 and secs > 0
        bound = {"wake": 0.0105, "step": 0.0037, "timer": 0.0037, "external": 0.02}
        assert secs <= bound[kind]


def test_a_timing_drives_one_loop_at_a_time():
    timing = vt.Timing(max_cost=0.01)
    loop = vt.VirtualEventLoop(timing=timing)
    with pytest.raises(RuntimeError, match="in use by"):
        vt.VirtualEventLoop(timing=timing)
    with pytest.raises(RuntimeError, match="in use by"):
        vt.run(asyncio.sleep(0), timing=timing)
    loop.close()
    vt.run(asyncio.sleep(0), timing=timing)  # then it replays


# Uses asyncio's policy system on purpose: deprecated from Python 3.14.
@pytest.mark.filterwarnings("ignore:.*polic:DeprecationWarning")
def test_policy_loops_replay_the_same_timing():
    timing = seeded(3, max_late=0.005, max_cost=0.002)
    traces = []
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(vt.EventLoopPolicy(timing=timing))
    try:
        for _ in range(2):
            t = []
            asyncio.run(busy_program(t))
            traces.append(t)
    finally:
        asyncio.set_event_loop_policy(old)
    assert traces[0] == traces[1]


# ---- a draw that ends the run (hypothesis's control flow) -----------------------


def _stop_after(n):
    calls = [0]

    def draw(k):
        calls[0] += 1
        if calls[0] > n:
            raise StopTest(0)
        return 1

    return draw


@pytest.mark.parametrize(
    "bounds",
    [{"max_cost": 0.003}, {"max_late": 0.003}, {"max_jitter": 0.003}],
    ids=["step", "wake", "external"],
)
@pytest.mark.parametrize("after", [0, 3])
def test_a_failing_draw_ends_the_run_and_reaches_the_caller(bounds, after):
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        async def background():
            for _ in range(50):
                await vt.latency(0.01)  # draws inside a task step

        def tick(n):  # draws inside a timer callback
            vt.call_external(0.01, lambda: None)
            if n:
                loop.call_later(0.01, tick, n - 1)
            else:
                done.set_result(None)

        loop.call_later(0.01, tick, 50)
        task = asyncio.create_task(background())
        await done
        await task

    t0 = time.monotonic()
    timing = vt.Timing(draw=_stop_after(after), **bounds)
    with pytest.raises(StopTest):
        vt.run(main(), timing=timing)
    assert time.monotonic() - t0 < 10
    # The Timing is spent: what ran is recorded, the rest replays as 0.
    vt.run(main(), timing=timing)


def test_long_runs_draw_only_max_draws_decisions():
    """Hypothesis caps one example's data: a run with many more steps than
    that is fuzzed for its first max_draws decisions, then punctual, rather
    than ending every example as data too large."""
    seen = []

    @settings(
        max_examples=5,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(vt.timings(max_cost=0.005, max_draws=500))
    def check(timing):
        async def main():
            for _ in range(5000):
                await asyncio.sleep(0)

        vt.run(main(), timing=timing)
        seen.append(timing._draws)

    check()
    assert seen and max(seen) == 500


# ---- properties every real loop keeps, under every Timing ------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    timing=vt.timings(max_late=0.004, max_cost=0.003, max_jitter=0.01),
    delays=st.lists(st.integers(0, 40), min_size=1, max_size=25),
    sleeps=st.lists(st.integers(0, 30), min_size=1, max_size=6),
)
def test_deadline_order_never_early_monotonic_clock(timing, delays, sleeps):
    fired = []  # (deadline, seq, time fired)
    woke = []  # (deadline, time woken)
    clock = []

    async def main():
        loop = asyncio.get_running_loop()

        deadlines = {}

        def fire(seq):
            fired.append((deadlines[seq], seq, loop.time()))
            clock.append(loop.time())

        for seq, d in enumerate(delays):
            deadlines[seq] = loop.call_later(d * 0.001, fire, seq).when()

        async def sleeper(ds):
            for d in ds:
                deadline = loop.time() + d * 0.001
                await asyncio.sleep(d * 0.001)
                woke.append((deadline, loop.time()))
                clock.append(loop.time())

        async def outside():
            for d in sleeps:
                await vt.latency(d * 0.001)
                clock.append(loop.time())

        await asyncio.gather(sleeper(sleeps), sleeper(sleeps[::-1]), outside())
        await asyncio.sleep(1.0)  # every timer has fired by then

    vt.run(main(), timing=timing)
    assert len(fired) == len(delays)
    # Timers scheduled together run in (deadline, scheduling) order...
    assert [(w, s) for w, s, _ in fired] == sorted((w, s) for w, s, _ in fired)
    # ...never before their deadline (to the clock's resolution, as asyncio)...
    assert all(t >= w - 1e-9 for w, _, t in fired)
    assert all(t >= d - 1e-9 for d, t in woke)
    # ...and the clock never goes back.
    assert clock == sorted(clock)
