"""pytest --timing-fuzz with no --timing-max-* uses timings()'s documented
defaults (one source: pywheel.testing._timing.DEFAULT_BOUNDS); given any
bound, the others are 0, as for timings()."""

import re

from helpers import run_pytest

from pywheel.testing._timing import DEFAULT_BOUNDS

SUITE = """
import asyncio
import pytest

BOUNDS = []

@pytest.mark.virtual_time
async def test_marked():
    t = asyncio.get_running_loop().timing
    BOUNDS.append(None if t is None else (t.max_late, t.max_cost, t.max_jitter))
    await asyncio.sleep(1)

def test_bounds():
    print("BOUNDS", BOUNDS[1:])
    assert BOUNDS[0] is None and len(BOUNDS) == 3, BOUNDS  # punctual, then 2 fuzzed
    assert len(set(BOUNDS[1:])) == 1, BOUNDS
"""


def _bounds(r):
    m = re.search(r"BOUNDS \[\((.*?)\)", r.stdout)
    assert m, r.stdout + r.stderr
    return tuple(float(x) for x in m.group(1).split(","))


def test_no_bound_given_means_the_defaults(tmp_path):
    files = {"test_x.py": SUITE}
    r = run_pytest(tmp_path, files, "--timing-fuzz=2", "-s", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    want = (DEFAULT_BOUNDS["max_late"], DEFAULT_BOUNDS["max_cost"], DEFAULT_BOUNDS["max_jitter"])
    assert _bounds(r) == want == (0.02, 0.002, 0.01)


def test_one_bound_given_leaves_the_others_at_zero(tmp_path):
    files = {"test_x.py": SUITE}
    r = run_pytest(tmp_path, files, "--timing-fuzz=2", "--timing-max-cost=0.001", "-s", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _bounds(r) == (0.0, 0.001, 0.0)


def test_the_real_bug_corpus_uses_the_same_defaults():
    from examples.real_bugs import BOUNDS

    assert BOUNDS is DEFAULT_BOUNDS
