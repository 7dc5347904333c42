"""pywheel.testing: Timing.minimize() removes decisions in groups when no
single one can go (delta debugging), halves the values left, and keeps to
its time budget (issue 21, point 4: a shrunk failure ends on the few
decisions that matter, within a minute)."""

import asyncio
import random

from helpers import fails_under

from pywheel import testing as vt


async def an_odd_number_of_slips_breaks_it():
    """A blinker that flips its phase on every late beat: it ends in the
    wrong phase after an odd number of them.  No late beat can be removed
    alone (the count turns even and the run passes); any two together can."""
    loop = asyncio.get_running_loop()
    flipped = False
    for _ in range(60):
        t0 = loop.time()
        await asyncio.sleep(0.01)
        if loop.time() - t0 > 0.0105:
            flipped = not flipped
    assert not flipped, "out of phase"


def fails(timing, runs=None):
    return fails_under(an_odd_number_of_slips_breaks_it, timing, runs)


def a_failing_timing(at_least=7):
    for seed in range(200):
        r = random.Random(seed)
        t = vt.Timing(
            max_late=0.005, draw=lambda n, r=r: r.randint(1, n) if r.random() < 0.3 else 0
        )
        if fails(t) and len(t.decisions) >= at_least:
            return t
    raise AssertionError("no seed fails")  # pragma: no cover


def test_minimize_removes_decisions_that_can_only_go_together():
    t = a_failing_timing()
    runs = []
    m = t.minimize(lambda x: fails(x, runs))
    # One late beat is enough; zeroing them one at a time removes none.
    assert len(m.decisions) == 1, m
    assert fails(m) and fails(m)  # replays
    assert len(runs) <= 1 + 3 * 10 * len(t.decisions)  # at most ~10 runs per decision and pass


async def one_late_wake_up_breaks_it():
    loop = asyncio.get_running_loop()
    for _ in range(20):
        await asyncio.sleep(0.01)
    t0 = loop.time()
    await asyncio.sleep(0.01)
    assert loop.time() - t0 < 0.013, "late"  # 3 ms late or more fails


def test_minimize_halves_a_decision_while_it_still_fails():
    decided = iter([0] * 20 + [16])  # the 21st wake-up 16 ms late, the rest punctual
    t = vt.Timing(max_late=0.02, draw=lambda n: next(decided, 0))

    def late_fails(x):
        return fails_under(one_late_wake_up_breaks_it, x)

    assert late_fails(t)
    m = t.minimize(late_fails)
    ((kind, _when, secs, _site),) = m.decisions
    # 16 -> 8 -> 4 ms still fail; 2 ms does not.
    assert kind == "wake" and abs(secs - 0.004) < 1e-9, m
    assert late_fails(m)


def test_minimize_stops_at_its_time_budget():
    t = a_failing_timing()
    runs = []
    m = t.minimize(lambda x: fails(x, runs), seconds=0)
    # Out of time at once: only the check that the Timing still fails ran.
    assert len(runs) == 1
    assert m.decisions == t.decisions and fails(m)


async def a_late_eleventh_beat_breaks_it():
    """Two timers 2 ms apart before the beats: a wake-up late for the first
    runs both in one batch, so the loop wakes once fewer; the failure is the
    eleventh beat being late, whatever happened before."""
    loop = asyncio.get_running_loop()
    loop.call_later(0.010, lambda: None)
    loop.call_later(0.012, lambda: None)
    await asyncio.sleep(0.02)
    for i in range(20):
        t0 = loop.time()
        await asyncio.sleep(0.01)
        if i == 10:
            assert loop.time() - t0 < 0.0125, "the eleventh beat was late"


def test_minimize_realigns_the_decisions_after_one_it_removes():
    # Wake-ups: the first timer 3 ms late (so both timers run at once),
    # the sleep(0.02), then the beats: the 13th is the eleventh beat.
    decided = iter([3] + [0] * 11 + [3])
    t = vt.Timing(max_late=0.005, draw=lambda n: next(decided, 0))

    def beat_fails(x):
        return fails_under(a_late_eleventh_beat_breaks_it, x)

    assert beat_fails(t) and len(t.decisions) == 2
    m = t.minimize(beat_fails)
    # Zeroing the first leaves the other naming the 13th wake-up, now the
    # tenth beat (the timers wake the loop twice): it passes, unless the
    # later decision moves one wake-up on.
    ((kind, when, secs, _site),) = m.decisions
    assert kind == "wake" and abs(secs - 0.003) < 1e-9 and abs(when - 0.13) < 0.001, (
        m
    )  # + 10 µs iterations
    assert beat_fails(m)
