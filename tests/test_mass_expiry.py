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


def ahead(setup, tick: float = 0.001):
    """A new Wheel on which setup(w, at) scheduled everything before `at`.

    On a loaded machine scheduling 16,384 timers can take longer than a
    0.3 s lead; the expiry would then begin with part of them and the test
    would check a smaller expiry than it means to.  Such an attempt is thrown
    away (closed) and made again with a longer lead.  Returns (w, at, state),
    state being what setup returned."""
    for lead in (0.3, 1.2, 5.0, 20.0):
        w = pywheel.Wheel(tick=tick)
        at = w.time() + lead
        try:
            state = setup(w, at)
            if w.time() < at:  # nothing fired yet: never early
                return w, at, state
        except RuntimeError:  # the early expiry closed the wheel
            pass
        w.close()
    pytest.fail("scheduling never fit in a 20 s lead")


def schedule_all(w, n, deadline_of):
    """Schedules n timers at deadline_of(i); returns (ran, done): the order
    in which they ran, and an event set once all of them have."""
    ran = []
    done = threading.Event()

    def cb(i):
        ran.append(i)
        if len(ran) == n:
            done.set()

    for i in range(n):
        w.call_at(deadline_of(i), cb, i)
    return ran, done


def run_all(w, n, deadline_of, before=None):
    """Schedules n timers at deadline_of(i), waits for all of them to run,
    returns the order in which they ran."""
    ran, done = schedule_all(w, n, deadline_of)
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
    w, at, (ran, done) = ahead(lambda w, at: schedule_all(w, n, lambda i: at))
    with w:
        assert done.wait(30), f"{len(ran)} of {n} ran"
        assert ran == list(range(n))
        assert w.stats()["max_batch"] == PART


def test_cancel_of_a_later_part_while_the_first_runs():
    n = 3 * PART
    gate = threading.Event()
    started = threading.Event()
    ran = []

    def first():
        started.set()
        gate.wait(10)  # releases the GIL: the main thread cancels meanwhile

    def setup(w, at):
        started.clear()
        ran.clear()
        w.call_at(at, first)
        return [w.call_at(at, ran.append, i) for i in range(n)]

    w, at, hs = ahead(setup)
    with w:
        assert started.wait(10)
        assert all(h.cancel() for h in hs[1::2])  # most are in parts not yet gathered
        gate.set()
        assert wait_for(lambda: len(ran) == n // 2)
        assert ran == list(range(0, n, 2))
        s = w.stats()
        assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]


def test_timer_scheduled_in_the_past_runs_in_the_next_part_not_this_one():
    n = 2 * PART
    ran = []

    def setup(w, at):
        def cb(i):
            ran.append(i)
            if i == 0:
                w.call_at(at - 1.0, ran.append, "past")

        ran.clear()
        for i in range(n):
            w.call_at(at, cb, i)

    w, at, _ = ahead(setup)
    with w:
        assert wait_for(lambda: len(ran) == n + 1)
        # not inside the running part; ahead of the pending rest (earlier deadline)
        assert ran.index("past") == PART
        assert [x for x in ran if x != "past"] == list(range(n))


@pytest.mark.parametrize("tick", [1e-3, 10.0])
def test_close_during_a_large_expiry_stops_at_a_part(tick):
    n = 4 * PART
    ran = []
    left = []

    def setup(w, at):
        def cb(i):
            ran.append(i)
            if i == 10:
                left.extend(w.close())

        ran.clear()
        left.clear()
        for i in range(n):
            w.call_at(at, cb, i)

    w, at, _ = ahead(setup, tick)
    with w:
        assert wait_for(lambda: w.closed and len(ran) + len(left) >= n - PART)
        assert len(ran) <= PART  # the part that was running finished; no other started
        assert len(ran) + len(left) == n
        assert all(h.cancelled() for h in left)
