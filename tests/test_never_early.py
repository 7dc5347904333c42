"""Never early (docs/explanation/guarantees.md, "Never early"): a callback never
runs before its when(), on a threaded wheel (call_later and call_at) and on a
ManualWheel, whose time() inside a callback is its deadline's tick.  How a
float deadline is rounded so that it is never early: test_deadline_rounding.py."""

import random
import time

from helpers import ceil_tick_ns, wait_for

from pywheel import ManualWheel

# ---------------------------------------------------------------------------
# never early


def test_never_early_threaded(wheel):
    rng = random.Random(20240601)
    n = 300
    ran_at = [None] * n

    def cb(i):
        ran_at[i] = time.monotonic()

    plan = []
    for i in range(n):
        d = rng.choice([0.0, rng.uniform(0, 0.03), rng.uniform(0, 0.0015)])
        t0 = time.monotonic()
        h = wheel.call_later(d, cb, i)
        plan.append((t0, d, h))
    assert wait_for(lambda: all(t is not None for t in ran_at), timeout=5.0)
    for (t0, d, h), t in zip(plan, ran_at, strict=True):
        assert t >= t0 + d
        assert t >= h.when()
        assert h.when() >= t0 + d - 1e-9  # when() is the exact deadline (ns rounding)


def test_never_early_threaded_call_at(wheel):
    rng = random.Random(3)
    n = 200
    ran_at = [None] * n
    handles = []
    base = wheel.time()
    for i in range(n):
        when = base + rng.uniform(-0.001, 0.03)
        handles.append(wheel.call_at(when, lambda i=i: ran_at.__setitem__(i, time.monotonic())))
    assert wait_for(lambda: all(t is not None for t in ran_at), timeout=5.0)
    for h, t in zip(handles, ran_at, strict=True):
        assert t >= h.when()


def test_manual_time_inside_callback_is_the_deadlines_tick():
    w = ManualWheel(tick=0.01)
    seen = []
    for when in (0.001, 0.01, 0.0100001, 0.019999, 0.02, 0.35):
        w.call_at(when, lambda when=when: seen.append((when, w.time_ns())))
    assert w.advance(1) == 6
    for when, now_ns in seen:
        when_ns = round(when * 1e9)
        assert now_ns == ceil_tick_ns(when_ns, 10_000_000)
        assert now_ns >= when_ns
    w.close()
