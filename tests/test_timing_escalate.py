"""``--timing-fuzz=N --timing-escalate=TOP`` (issue 28, point 6): the N runs
climb a ladder of bounds (the given or default bounds times 1, 2.5, 5, 10,
... up to TOP); the ladder is a function of the seed; the report names the
smallest level that broke the test; a race that needs ~60 ms of lateness is
found by the ladder and not by the fixed defaults (20 ms); the reported
token replays the failure.  Each pytest run is a fresh child."""

import re

import pytest
from helpers import run_pytest, run_shell

from pywheel.testing import _session
from pywheel.testing._timing import DEFAULT_BOUNDS

DEFAULTS = (DEFAULT_BOUNDS["max_late"], DEFAULT_BOUNDS["max_cost"], DEFAULT_BOUNDS["max_jitter"])

# A lease of 200 ms renewed every 140 ms: a renewal that wakes 60 ms late or
# more finds the lease lapsed.  The defaults' 20 ms late wake-ups never get
# there; 100 ms (x5) does.
LEASE = """
import asyncio

async def test_lease_renewed_in_time():
    loop = asyncio.get_running_loop()
    expires = loop.time() + 0.2
    for _ in range(20):
        await asyncio.sleep(0.14)          # renew 60 ms before expiry
        assert loop.time() < expires, f"lease lapsed at t={loop.time():.3f}"
        expires = loop.time() + 0.2
"""

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def _pytest(tmp_path, *args):
    return run_pytest(tmp_path, {"test_lease.py": LEASE, "pytest.ini": INI}, *args)


def test_the_ladder_is_a_function_of_the_seed():
    one = _session.schedules(DEFAULTS, 7, "t.py::test", 20, 10.0)
    two = _session.schedules(DEFAULTS, 7, "t.py::test", 20, 10.0)
    assert [s.token for s in one] == [s.token for s in two]
    assert [s.timing(0)._draw(100) for s in one] == [s.timing(0)._draw(100) for s in two]
    # Each run keeps the seed it has without the ladder, and the runs at x1
    # are exactly the fixed-bounds runs.
    fixed = _session.schedules(DEFAULTS, 7, "t.py::test", 20)
    assert [s.seed for s in one] == [s.seed for s in fixed]
    assert [s.token for s in one[:5]] == [s.token for s in fixed[:5]]
    # Blocks, lowest first, up to the top; 20 runs over 4 levels: 5 each.
    assert [s.level for s in one] == [1.0] * 5 + [2.5] * 5 + [5.0] * 5 + [10.0] * 5
    assert one[10].token.startswith("0.1,0.01,0.05,")
    assert one[-1].token.startswith("0.2,0.02,0.1,")
    assert one[0].levels == ((1.0, (1, 5)), (2.5, (6, 10)), (5.0, (11, 15)), (10.0, (16, 20)))
    # Uneven: 10 runs over x1, x2.5, x5, x7: every level has runs, the top last.
    uneven = _session.schedules(DEFAULTS, 0, "t.py::test", 10, 7.0)
    assert [s.level for s in uneven] == [1.0] * 3 + [2.5] * 2 + [5.0] * 3 + [7.0] * 2
    # Fewer runs than levels: the first and the top kept.
    assert [s.level for s in _session.schedules(DEFAULTS, 0, "x", 2, 10.0)] == [1.0, 10.0]
    assert [s.level for s in _session.schedules(DEFAULTS, 0, "x", 1, 10.0)] == [1.0]
    # A bound given as 0 stays 0 at every level.
    assert {s.max_cost for s in _session.schedules((0.005, 0.0, 0.0), 0, "x", 8, 10.0)} == {0.0}
    assert _session.ladder(10) == [1.0, 2.5, 5.0, 10.0]
    assert _session.ladder(3) == [1.0, 2.5, 3.0]
    assert _session.ladder(100) == [1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0]


def test_the_ladder_finds_a_race_the_fixed_defaults_miss_and_names_its_level(tmp_path):
    fixed = _pytest(tmp_path, "--timing-fuzz=20")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    r = _pytest(tmp_path, "-v", "--timing-fuzz=20", "--timing-escalate=10")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bounds escalate over the runs: x1, x2.5, x5, x10" in r.stdout
    assert "lease lapsed" in r.stdout
    # 60 ms of lateness: x2.5 (50 ms) cannot, x5 (100 ms) can.
    m = re.search(r"^failed on timing-fuzz run (\d+) of 20", r.stdout, re.M)
    assert m and 11 <= int(m.group(1)) <= 15, r.stdout
    assert (
        "bounds at level x5 of the ladder x1, x2.5, x5, x10 (max_late=0.1, max_cost=0.01, "
        "max_jitter=0.05): the smallest level that broke the test; passed at "
        "x1 (runs 1-5), x2.5 (runs 6-10)"
    ) in r.stdout
    token = re.search(r"--timing-replay=(\S+)", r.stdout).group(1)
    assert token.startswith("0.1,0.01,0.05,")
    # The replay line reruns that run's schedule (its bounds in the token;
    # --timing-escalate, a fuzz option, is not on it) and fails the same way.
    line = re.search(r"^replay: (.*)$", r.stdout, re.M).group(1)
    assert "--timing-escalate" not in line and f"--timing-replay={token}" in line
    again = run_shell(tmp_path, line)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "lease lapsed" in again.stdout


def test_the_same_command_fails_on_the_same_run(tmp_path):
    runs = []
    for _ in range(2):
        r = _pytest(tmp_path, "--timing-fuzz=20", "--timing-escalate=10", "--timing-seed=3")
        m = re.search(r"^failed on timing-fuzz run (\d+) of 20", r.stdout, re.M)
        runs.append((m and m.group(1), re.search(r"--timing-replay=(\S+)", r.stdout).group(1)))
    assert runs[0] == runs[1] and runs[0][0] is not None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--timing-fuzz=3", "--timing-escalate=1"], "a factor of the bounds > 1"),
        (["--timing-fuzz=3", "--timing-escalate=0.5"], "a factor of the bounds > 1"),
        (["--timing-fuzz=3", "--timing-escalate=5000"], "<= 1000"),
        (["--timing-fuzz=3", "--timing-escalate=nan"], "a factor of the bounds > 1"),
        (["--virtual-time", "--timing-escalate=10"], "give both"),
    ],
)
def test_a_bad_ladder_is_a_usage_error(tmp_path, args, says):
    r = _pytest(tmp_path, *args)
    assert r.returncode == 4 and says in r.stderr, r.stdout + r.stderr
