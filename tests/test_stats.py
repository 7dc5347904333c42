"""Statistics (docs/tutorials/idle-timeouts.md, "Reading stats()"; the keys in docs/reference/):
stats() has its documented keys and
types, and scheduled == fired + cancelled + pending holds after a mixed
workload, on a ManualWheel and on a threaded Wheel."""

import random
import time

from helpers import conserved, wait_for

STATS_KEYS = {
    "rescheduled",
    "scheduled",
    "fired",
    "cancelled",
    "pending",
    "errors",
    "batches",
    "wakeups",
    "max_batch",
    "skipped_runs",
    "late_p50",
    "late_p99",
    "late_max",
    "tick",
}


# ---------------------------------------------------------------------------
# stats


def test_stats_keys_and_types(anywheel):
    s = anywheel.stats()
    assert set(s) == STATS_KEYS
    for k in ("scheduled", "fired", "cancelled", "pending", "errors", "batches"):
        assert isinstance(s[k], int) and s[k] == 0
    for k in ("late_p50", "late_p99", "late_max", "tick"):
        assert isinstance(s[k], float)
    assert s["tick"] == 0.001


def test_stats_conservation_mixed_workload(manual):
    rng = random.Random(5)
    manual.set_exception_handler(lambda w, ctx: None)
    handles = []

    def maybe_raise(i):
        if i % 7 == 0:
            raise ValueError(i)

    for i in range(500):
        d = rng.uniform(-0.01, 0.2)
        if i % 50 == 0:
            handles.append(manual.call_every(rng.uniform(0.003, 0.02), maybe_raise, i))
        else:
            handles.append(manual.call_later(d, maybe_raise, i))
    assert conserved(manual)
    for h in rng.sample(handles, 120):
        h.cancel()
    assert conserved(manual)
    manual.advance(0.1)
    assert conserved(manual)
    s = manual.stats()
    assert s["errors"] > 0
    assert s["pending"] == len(manual) > 0
    manual.advance(0.05)
    manual.close()
    s = manual.stats()
    assert conserved(manual)
    assert s["pending"] == 0
    assert s["batches"] >= 1
    assert s["max_batch"] >= 1


def test_stats_conservation_threaded(wheel):
    rng = random.Random(6)
    hs = [wheel.call_later(rng.uniform(0, 0.02), lambda: None) for _ in range(300)]
    for h in hs[::3]:
        h.cancel()
    r = wheel.call_every(0.005, lambda: None)
    time.sleep(0.03)
    r.cancel()
    assert wait_for(lambda: len(wheel) == 0, timeout=5.0)
    s = wheel.stats()
    assert s["fired"] + s["cancelled"] == s["scheduled"]
    assert s["wakeups"] >= 1
    assert s["late_max"] >= s["late_p99"] >= s["late_p50"] >= 0
