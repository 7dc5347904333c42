"""A large expiry on a threaded wheel is handed to the callbacks in parts.

The wheel's thread gathers at most a part (4096 timers, PW_CHUNK in csrc/binding/module.h)
before the first callback runs, then gathers the next part while it still
holds the GIL.  What must not change: every timer runs once, in exact-deadline
order (even inside one tick, whose timers a part boundary may split), nothing
cancelled runs, and the counters add up.  These tests wait generously and
assert order and counts, never speed.
"""

import threading
import time

import pytest

import pywheel

PART = 4096


def wait_for(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True


def run_all(w, n, deadline_of, before=None):
    """Schedules n timers at deadline_of(i), waits for all of them to run,
    returns the order in which they ran."""
    ran = []
    done = threading.Event()

    def cb(i):
        ran.append(i)
        if len(ran) == n:
            done.set()

    for i in range(n):
        w.call_at(deadline_of(i), cb, i)
    if before:
        before()
    assert done.wait(30), f"{len(ran)} of {n} ran"
    return ran


def test_one_tick_split_into_parts_keeps_exact_deadline_order():
    # tick=1 s: all 3 parts' worth of timers share one tick, scheduled in the
    # reverse of their exact deadlines; a split inside the tick must not run
    # a later deadline before an earlier one of the next part
    n = 3 * PART + 17
    with pywheel.Wheel(tick=1.0) as w:
        base = (int(w.time()) + 2) * 1.0 - 0.5  # inside the next tick but one

        def deadline_of(i):
            return base + (n - i) * 1e-5

        ran = run_all(w, n, deadline_of)
        assert ran == list(range(n - 1, -1, -1))
        s = w.stats()
        assert s["max_batch"] == PART, s
        assert s["fired"] == n and s["pending"] == 0


def test_equal_deadlines_run_in_scheduling_order_across_parts():
    n = 2 * PART + 1
    with pywheel.Wheel() as w:
        at = w.time() + 0.3
        assert run_all(w, n, lambda i: at) == list(range(n))
        assert w.stats()["max_batch"] == PART


def test_cancel_of_a_later_part_while_the_first_runs():
    n = 3 * PART
    with pywheel.Wheel() as w:
        at = w.time() + 0.3
        gate = threading.Event()
        started = threading.Event()
        ran = []

        def first():
            started.set()
            gate.wait(10)  # releases the GIL: the main thread cancels meanwhile

        w.call_at(at, first)
        hs = [w.call_at(at, ran.append, i) for i in range(n)]
        assert started.wait(10)
        assert all(h.cancel() for h in hs[1::2])  # most are in parts not yet gathered
        gate.set()
        assert wait_for(lambda: len(ran) == n // 2)
        assert ran == list(range(0, n, 2))
        s = w.stats()
        assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]


def test_timer_scheduled_in_the_past_runs_in_the_next_part_not_this_one():
    n = 2 * PART
    with pywheel.Wheel() as w:
        at = w.time() + 0.3
        ran = []

        def cb(i):
            ran.append(i)
            if i == 0:
                w.call_at(at - 1.0, ran.append, "past")

        for i in range(n):
            w.call_at(at, cb, i)
        assert wait_for(lambda: len(ran) == n + 1)
        # not inside the running part; ahead of the pending rest (earlier deadline)
        assert ran.index("past") == PART
        assert [x for x in ran if x != "past"] == list(range(n))


@pytest.mark.parametrize("tick", [1e-3, 10.0])
def test_close_during_a_large_expiry_stops_at_a_part(tick):
    n = 4 * PART
    with pywheel.Wheel(tick=tick) as w:
        at = w.time() + 0.3
        ran = []
        left = []

        def cb(i):
            ran.append(i)
            if i == 10:
                left.extend(w.close())

        for i in range(n):
            w.call_at(at, cb, i)
        assert wait_for(lambda: w.closed and len(ran) + len(left) >= n - PART)
        assert len(ran) <= PART  # the part that was running finished; no other started
        assert len(ran) + len(left) == n
        assert all(h.cancelled() for h in left)
