"""@given(testing.timings()) failures are reported minimized (issue 28,
point 1, the hypothesis side): under pytest the plugin minimizes the first
failing Timing with Timing.minimize and hypothesis then runs again with the
strategy playing the minimized decisions, so its report shows them, its
shrinker works only on the other arguments, and nothing trips its flaky
detection or points its explanation into pywheel (pywheel/testing/_shrink.py)."""

import re

from helpers import run_pytest
from test_timing_minimized_report import TTLCACHE

READS = """
import asyncio

from hypothesis import given, settings, strategies as st

from pywheel import testing
from ttlcache import TTLCache


async def reads(n=0):
    async def fetch(key):
        return 1

    cache = TTLCache(fetch)
    await cache.load("k")
    refresher = asyncio.create_task(cache.refresher("k"))
    loop = asyncio.get_running_loop()
    while loop.time() < 0.3:
        await asyncio.sleep(0.001)
        await cache.get("k")
    refresher.cancel()
    return cache.misses


SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=200)
"""

ONE = (
    READS
    + """

@SETTINGS
@given(testing.timings(max_late=0.002, max_jitter=0.01))
def test_reads_never_miss(timing):
    assert testing.run(reads(), timing=timing) == 0
"""
)

OTHERS = (
    READS
    + """

@SETTINGS
@given(testing.timings(max_late=0.002, max_jitter=0.01), st.integers(0, 10**6))
def test_reads_never_miss(timing, n):
    assert testing.run(reads(n), timing=timing) == 0
"""
)

SHARED = (
    READS
    + """
T = testing.timings(max_late=0.002, max_jitter=0.01)


@SETTINGS
@given(T)
def test_a_fails(timing):
    assert testing.run(reads(), timing=timing) == 0


@settings(derandomize=True, database=None, deadline=None, max_examples=20)
@given(T)
def test_b_draws_again(timing):
    testing.run(asyncio.sleep(1), timing=timing)
    assert timing._source["script"] is None  # the strategy draws, as before a's failure
"""
)


def _run(tmp_path, test, *args):
    r = run_pytest(tmp_path, {"ttlcache.py": TTLCACHE, "test_h.py": test}, *args, timeout=300)
    return r, r.stdout + r.stderr


def test_hypothesis_reports_the_minimized_timing_in_one_decision(tmp_path):
    r, out = _run(tmp_path, ONE)
    assert r.returncode == 1, out
    assert re.search(
        r"pywheel minimized the first failing Timing from \d+ decisions to 1 in", out
    ), out
    # hypothesis's own report: the final run's Timing, one decision, load()'s late answer.
    notes = re.findall(r"\btiming: (Timing\(.*)", r.stdout)
    assert notes and re.fullmatch(
        r"Timing\(max_late=0\.002, max_jitter=0\.01: latency\(\) in load\(\) at ttlcache\.py:\d+ "
        r"sent at t=[\d.]+ arrived \d+ ms late\)",
        notes[-1],
    ), notes
    for bad in ("Flaky", "inconsistent data", "Inconsistent data", "Explanation", "_loop.py"):
        assert bad not in out, out
    assert "Minimized" not in out  # the first run's end is not shown: the report is the second's


def test_the_other_arguments_still_shrink(tmp_path):
    r, out = _run(tmp_path, OTHERS)
    assert r.returncode == 1, out
    assert "to 1 in" in out, out
    # hypothesis shrank n (the failure does not depend on it) to its simplest.
    assert "Failing test case: test_reads_never_miss(" in out, out
    assert re.search(r"^E\s+n=0,", out, re.M), out


def test_a_shared_strategy_draws_again_in_the_next_test(tmp_path):
    r, out = _run(tmp_path, SHARED)
    assert "test_h.py::test_b_draws_again PASSED" in out or "1 failed, 1 passed" in out, out
    assert "pywheel minimized" in out, out


def test_timing_minimize_0_leaves_hypothesis_alone(tmp_path):
    quick = ONE.replace("max_examples=200)", "max_examples=200, phases=['explicit', 'generate'])")
    r, out = _run(tmp_path, quick, "--timing-minimize=0")
    assert r.returncode == 1, out
    assert "pywheel minimized" not in out, out
