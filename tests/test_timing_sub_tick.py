"""A timing bound below one tick perturbs (issue 27, finding 6).

``timings(max_late=0.0005)`` and ``--timing-max-late=0.0005`` on the 1 ms
tick were accepted and, decided in whole ticks, never perturbed anything: the
same result as all-zero bounds, which both refuse.  Such a bound is now
decided in one step of its own size (on time, or the whole bound), and a
bug that shows only with a sub-tick late wake-up is caught on both paths."""

import asyncio

import pytest
from helpers import run_pytest
from hypothesis import HealthCheck, given, settings

from pywheel import testing

SCENARIO = """
import asyncio

async def scenario():
    # The reply is due at t=10, the caller gives up at t=10.0003: on time
    # the reply wakes the caller first; a wake-up 0.3 ms late or more runs
    # both timers in one batch, and the timeout cancels the caller before
    # the reply's wake-up runs.
    loop = asyncio.get_running_loop()
    reply = loop.create_future()
    loop.call_at(10.0, reply.set_result, "pong")
    async with asyncio.timeout_at(10.0003):
        return await reply
"""


def _scenario():
    ns = {}
    exec(SCENARIO, ns)
    return ns["scenario"]


def test_the_scenario_passes_punctually_and_with_whole_tick_bounds_below_the_bug():
    scenario = _scenario()
    assert testing.run(scenario()) == "pong"
    t = testing.Timing(max_late=0.0005, draw=lambda n: 0)
    assert testing.run(scenario(), timing=t) == "pong"


def test_a_sub_tick_max_late_is_decided_as_the_whole_bound():
    scenario = _scenario()
    t = testing.Timing(max_late=0.0005, draw=lambda n: n)
    with pytest.raises(asyncio.TimeoutError):
        testing.run(scenario(), timing=t)
    assert "woke 0.5 ms late" in repr(t)
    # ... and replays.
    with pytest.raises(asyncio.TimeoutError):
        testing.run(scenario(), timing=t)


def test_timings_with_a_sub_tick_max_late_finds_a_sub_tick_bug():
    scenario = _scenario()

    @settings(
        max_examples=50,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(testing.timings(max_late=0.0005))
    def check(timing):
        testing.run(scenario(), timing=timing)

    with pytest.raises(asyncio.TimeoutError):
        check()


def test_timing_max_late_below_one_tick_finds_a_sub_tick_bug(tmp_path):
    files = {
        "scenario.py": SCENARIO,
        "test_sub_tick.py": """
            import pytest
            from scenario import scenario

            @pytest.mark.virtual_time
            async def test_reply():
                assert await scenario() == "pong"
        """,
    }
    r = run_pytest(tmp_path, files, "--timing-fuzz=20", "--timing-max-late=0.0005")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "TimeoutError" in out, out
    assert "woke 0.5 ms late" in out, out
