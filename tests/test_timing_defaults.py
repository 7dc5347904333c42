"""pywheel.testing.timings() with no bound uses documented, non-zero
defaults (issue 21, point 5); given any bound, the others are 0."""

import asyncio

import pytest

from pywheel import testing as vt
from pywheel.testing import _timing

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402


def _one(strategy):
    seen = []

    @settings(max_examples=1, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(timing):
        seen.append(timing)

    check()
    return seen[0]


def test_no_bound_means_the_documented_defaults():
    t = _one(vt.timings())
    assert (t.max_late, t.max_cost, t.max_jitter) == (0.02, 0.002, 0.01)
    assert (t.max_late, t.max_cost, t.max_jitter) == (
        _timing.DEFAULT_MAX_LATE,
        _timing.DEFAULT_MAX_COST,
        _timing.DEFAULT_MAX_JITTER,
    )
    doc = vt.timings.__doc__
    assert "max_late=0.02" in doc and "max_cost=0.002" in doc and "max_jitter=0.01" in doc


def test_one_bound_given_leaves_the_others_at_zero():
    t = _one(vt.timings(max_late=0.003))
    assert (t.max_late, t.max_cost, t.max_jitter) == (0.003, 0.0, 0.0)


def test_the_defaults_perturb():
    """Over a few examples, the default Timings make non-zero decisions of
    every kind (a default that tries nothing would pass every test)."""
    kinds = set()

    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(100):
            loop.call_later(0.005, lambda: None)
            await vt.latency(0.01)
            await asyncio.sleep(0.01)

    @settings(max_examples=30, database=None, derandomize=True, deadline=None)
    @given(vt.timings())
    def check(timing):
        vt.run(main(), timing=timing)
        kinds.update(kind for kind, *_ in timing.decisions)

    check()
    assert kinds == {"wake", "step", "timer", "external"}
