"""examples/timing_bugs: for each program, the punctual run passes; timings()
finds the bug within 300 examples (derandomized) and shrinks it; the shrunk
Timing fails again on replay; the fixed twin survives 150 examples."""

import importlib
import sys
from pathlib import Path

import pytest

from pywheel.testing import _loop

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "examples" / "timing_bugs").is_dir():  # tests copied out of the tree
    pytest.skip("examples/timing_bugs is not next to these tests", allow_module_level=True)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.timing_bugs import EXAMPLES  # noqa: E402
from examples.timing_bugs.hunt import fails, hunt, survives  # noqa: E402

# What each shrunk Timing must say (docs/explanation/timing-fuzz.md, "Bugs it
# finds", quotes these runs).
SHRUNK = {
    # the lease's renewal sleep starts one loop iteration (a 10 µs quantum) in
    "lease": ["woke 2 ms late for the deadline t=9.99801 (task in hold() at lease.py:"],
    "billing_drift": ["woke 5 ms late for each of 10 deadlines", "in meter() at billing_drift.py"],
    "reply_mismatch": ["external Queue.put_nowait() from send() at reply_mismatch.py:", "late"],
    "overlapping_job": ["latency() in sync_job() at overlapping_job.py:", "late"],
    "watchdog": ["steps of task in worker() at watchdog.py:", "took 2 ms each"],
    # a slow step of the program's own tasks (with the 10 µs quantum one
    # poller step of 1 ms is enough: the TTL timer starts after it)
    "lru_ttl": ["step of task in poller() at lru_ttl.py:", "took 1 ms"],
}


def _module(name):
    try:
        return importlib.import_module(f"examples.timing_bugs.{name}")
    except ImportError as exc:  # async-lru is in the test extra
        pytest.skip(f"{name}: {exc}")


@pytest.mark.parametrize("name", EXAMPLES)
def test_bug_found_shrunk_replayed_and_fixed(name, monkeypatch):
    module = _module(name)
    assert not fails(module, None), "the punctual run must pass"
    assert not fails(module, None, fixed=True)

    aborted = []
    real_abort = _loop.VirtualEventLoop._abort

    def abort(self, exc):
        aborted.append(type(exc).__name__)
        real_abort(self, exc)

    monkeypatch.setattr(_loop.VirtualEventLoop, "_abort", abort)
    first, shrunk, _calls = hunt(name, max_examples=300)
    assert first is not None and first <= 300
    assert not shrunk.punctual
    text = repr(shrunk)
    for part in SHRUNK[name]:
        assert part in text, text
    # Shrinking replays shorter data: hypothesis ends those examples from
    # inside a draw, and the loop hands its exception back (no hang).
    assert set(aborted) <= {"StopTest"}

    decisions = shrunk.decisions
    for _ in range(2):  # the same Timing object replays exactly
        assert fails(module, shrunk)
        assert shrunk.decisions == decisions

    survives(name, 150)
