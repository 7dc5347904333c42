"""A Timing's run is deterministic under the cyclic garbage collector.

A program that drops unfinished async generators in reference cycles (an
``async for`` broken out of, over a cursor that holds its connection, which
holds the cursor) has them finalized whenever the collector happens to run:
the loop's finalizer hook then schedules their ``aclose()``.  When the
collector runs depends on allocations outside the program (hypothesis's own,
earlier examples' garbage), so the same decisions made runs of different
lengths and hypothesis stopped with "inconsistent data".  A loop given a
``timing=`` keeps the collector off from its first run until it is closed
(docs/explanation/timing-fuzz.md, "The garbage collector during a
perturbed run")."""

import asyncio
import gc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import StopTest

from pywheel import testing

#: Containers each row allocates: enough that a young collection would land
#: inside the run, wherever the allocation count stood when it began.
JUNK = 300


class Connection:
    def __init__(self, trace):
        self.trace = trace
        self.cursor = None


async def rows(conn, k, trace):
    loop = asyncio.get_running_loop()
    try:
        for i in range(6):
            await asyncio.sleep(0.001)
            yield i
    finally:
        await asyncio.sleep(0)  # a cleanup that needs the loop, as a pool's does
        trace.append((round(loop.time(), 6), f"cursor {k} closed"))


async def query(k, trace):
    conn = Connection(trace)
    gen = rows(conn, k, trace)
    conn.cursor = gen  # conn -> cursor -> its frame -> conn: garbage once dropped
    async for r in gen:
        junk = [[i] for i in range(JUNK)]
        del junk
        if r == 2:
            break  # the cursor is left suspended, in the cycle
    await asyncio.sleep(0.002)


async def failing(trace):
    # A task holding itself through its exception's traceback.
    raise ValueError("boom")


async def program(trace):
    loop = asyncio.get_running_loop()
    bad = asyncio.ensure_future(failing(trace))
    await asyncio.gather(*(query(k, trace) for k in range(4)))
    for n in range(4):
        await asyncio.sleep(0.003)
        junk = [{} for _ in range(JUNK)]
        del junk
        trace.append((round(loop.time(), 6), f"tick {n}"))
    try:
        await bad
    except ValueError:
        pass


def run_traced(timing, young=0):
    """The program under ``timing``, started with ``young`` containers already
    counted toward the next young collection (what hypothesis's own
    allocations do between examples); returns what it observed and how many
    decisions of each kind the run made."""
    trace = []
    gc.collect()
    keep = [[] for _ in range(young)]
    testing.run(program(trace), timing=timing)
    del keep
    return trace, dict(timing._pos)


def seeded(seed, **bounds):
    import random

    r = random.Random(seed)
    return testing.Timing(draw=lambda n: r.randint(0, n) if r.random() < 0.3 else 0, **bounds)


@pytest.fixture(autouse=True)
def collector_on():
    """These tests need the collector on, as it is by default, and leave it so."""
    was = gc.isenabled()
    gc.enable()
    yield
    assert gc.isenabled(), "a test left the cyclic collector off"
    if not was:
        gc.disable()


def test_replay_is_the_same_wherever_the_collector_would_have_run():
    timing = seeded(3, max_late=0.002, max_cost=0.002)
    recorded = run_traced(timing)
    for young in range(0, 700, 25):
        assert run_traced(timing, young) == recorded, young


def test_given_timings_has_no_inconsistent_data_under_the_collector():
    calls = [0]

    @settings(
        max_examples=60,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(testing.timings())
    def survives(timing):
        calls[0] += 1
        run_traced(timing, young=calls[0] * 37 % 700)

    survives()  # raised FlakyStrategyDefinition ("inconsistent data") before


def test_collector_is_off_while_the_loop_is_open_and_restored_at_close():
    seen = []

    async def main():
        seen.append(gc.isenabled())

    loop = testing.VirtualEventLoop(timing=testing.Timing(max_late=0.001))
    assert gc.isenabled()  # made, never run: nothing changes yet
    loop.run_until_complete(main())
    assert not gc.isenabled()  # between runs too: a run's garbage waits for close
    loop.run_until_complete(main())
    loop.close()
    assert seen == [False, False] and gc.isenabled()


def test_a_loop_that_never_ran_leaves_the_collector_alone():
    loop = testing.VirtualEventLoop(timing=testing.Timing(max_late=0.001))
    loop.close()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        testing.run(asyncio.sleep(1), timing=testing.Timing(max_late=0.001))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collector_is_restored_when_the_run_raises():
    async def main():
        raise KeyError("x")

    with pytest.raises(KeyError):
        testing.run(main(), timing=testing.Timing(max_late=0.001))
    assert gc.isenabled()


def test_no_timing_no_change():
    seen = []

    async def main():
        seen.append(gc.isenabled())

    testing.run(main())
    assert seen == [True]


def test_two_open_loops_keep_it_off_until_both_close():
    a = testing.VirtualEventLoop(timing=testing.Timing(max_late=0.001))
    b = testing.VirtualEventLoop(timing=testing.Timing(max_late=0.001))
    a.run_until_complete(asyncio.sleep(0))
    b.run_until_complete(asyncio.sleep(0))
    a.close()
    assert not gc.isenabled()
    b.close()
    assert gc.isenabled()


def test_explicit_collect_still_collects_during_a_run():
    import weakref

    class Node:
        pass

    async def main():
        n = Node()
        n.me = n
        ref = weakref.ref(n)
        del n
        gc.collect()
        return ref() is None

    assert testing.run(main(), timing=testing.Timing(max_late=0.001))


def test_an_example_that_leaves_its_loop_open_gives_the_collector_back():
    loops = []

    @settings(max_examples=3, database=None, deadline=None)
    @given(testing.timings(max_late=0.002))
    def leaves_it_open(timing):
        loop = testing.VirtualEventLoop(timing=timing)
        loops.append(loop)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert not gc.isenabled()

    leaves_it_open()
    assert gc.isenabled()
    for loop in loops:
        loop.close()
    assert gc.isenabled()


def test_draw_error_ends_the_run_and_restores_the_collector():
    def draw(n):
        raise StopTest(0)

    with pytest.raises(StopTest):
        testing.run(asyncio.sleep(1), timing=testing.Timing(max_late=0.002, draw=draw))
    assert gc.isenabled()
