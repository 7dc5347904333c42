"""pywheel.testing: Timing.minimize() keeps only the recorded decisions a
failure needs (issue 21, point 4), in one run per decision and pass."""

import asyncio
import random

from helpers import fails_under

from pywheel import testing as vt


async def one_late_wake_up_breaks_it():
    """Fails only if the 51st wake-up is 3 ms late or more; 100 others
    whose perturbations do not matter."""
    loop = asyncio.get_running_loop()
    for _ in range(50):
        await asyncio.sleep(0.01)
    t0 = loop.time()
    await asyncio.sleep(0.01)
    assert loop.time() - t0 < 0.013, "late"
    for _ in range(50):
        await asyncio.sleep(0.01)


def fails(timing, counter=None):
    return fails_under(one_late_wake_up_breaks_it, timing, counter)


def a_failing_timing():
    for seed in range(100):
        r = random.Random(seed)
        t = vt.Timing(max_late=0.005, max_cost=0.002, draw=lambda n, r=r: r.randint(0, n))
        if fails(t):
            return t
    raise AssertionError("no seed fails")  # pragma: no cover


def test_minimize_ends_on_the_one_decision_that_matters():
    t = a_failing_timing()
    assert len(t.decisions) > 50
    runs = []
    m = t.minimize(lambda x: fails(x, runs))
    assert len(m.decisions) == 1
    kind, _when, secs, _site = m.decisions[0]
    assert kind == "wake" and secs >= 0.003
    assert fails(m) and fails(m)  # replays, again and again
    # One run to check, then one per decision per pass (at most 3 passes).
    assert len(runs) <= 1 + 3 * len(t.decisions)


def test_minimize_keeps_everything_when_nothing_can_go():
    t = a_failing_timing()
    m = t.minimize(lambda x: fails(x) and x.decisions == t.decisions)
    assert m.decisions == t.decisions


def test_minimize_of_a_timing_that_no_longer_fails_replays_it_whole():
    t = a_failing_timing()
    m = t.minimize(lambda x: False)  # say, a flaky failure
    assert fails(m) and m.decisions == t.decisions  # t's decisions, all of them


def test_minimize_runs_a_timing_not_run_yet_first():
    # A Timing not run yet (Timing.from_token()) is recorded by a first run
    # of fails(); one that passes then is returned as is, recorded.
    t = vt.Timing(max_late=0.005)  # no draw: punctual
    m = t.minimize(fails)
    assert m is t and t.punctual and repr(t) == "Timing(max_late=0.005: punctual)"
