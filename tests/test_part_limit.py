"""A threaded wheel hands a large expiry to the callbacks in parts of at most
4096 (docs/explanation/threading.md; stats()'s max_batch in docs/reference/) in every
kind of tick.

Tick 0 (deadlines at or before the clock's epoch, `reschedule(-inf)`) and
ticks longer than 2**32 ns have more offsets than the wheel's per-timer order
key holds; they were never split, so one part could hold them all.  Each test
has its timers scheduled by a callback on the wheel's own thread, so that all
of them are pending when the next batch is gathered (a caller on another
thread races the collector), then checks the part size and that they ran in
exact-deadline order, equal deadlines in scheduling order.
"""

import math
import threading

import pywheel

PART = 4096
N = 10_000


def run_scheduled_by_callback(w, schedule, n=N):
    """Runs schedule(w, record) inside a callback: it returns the handles,
    each run with its index as argument, in scheduling order.  Waits for all
    n, checks the part size and that they ran in (exact deadline, scheduling)
    order."""
    ran, handles = [], []
    done = threading.Event()

    def record(i):
        ran.append(i)
        if len(ran) == n:
            done.set()

    w.call_later(0, lambda: handles.extend(schedule(w, record)))
    assert done.wait(60), f"{len(ran)} of {n} ran"
    assert len(handles) == n
    expected = sorted(range(n), key=lambda i: (handles[i].when(), i))
    assert ran == expected, "ran out of (exact deadline, scheduling) order"
    s = w.stats()
    assert s["max_batch"] <= PART, s
    assert s["fired"] == n + 1 and s["pending"] == 0, s


def test_deadlines_before_the_epoch_come_in_parts():
    # scheduled in the reverse of their deadlines, with ties (kept in
    # scheduling order)
    def schedule(w, record):
        return [w.call_at((-(10**9) - (N - i) // 3) / 1e9, record, i) for i in range(N)]

    with pywheel.Wheel() as w:
        run_scheduled_by_callback(w, schedule)


def test_deadlines_far_before_the_epoch_come_in_parts():
    # seconds to days before the epoch, where the order key is coarse (nearby
    # deadlines share it): distinct deadlines far apart can still be cut
    def schedule(w, record):
        return [
            w.call_at(-(3 * 10**9 + ((i * 7919) % N) * 10**10) / 1e9, record, i) for i in range(N)
        ]

    with pywheel.Wheel() as w:
        run_scheduled_by_callback(w, schedule)


def test_rescheduled_to_minus_infinity_come_in_parts():
    def schedule(w, record):
        handles = [w.call_later(3600, record, i) for i in range(N)]
        for h in handles:
            assert h.reschedule(-math.inf)
        return handles

    with pywheel.Wheel() as w:
        run_scheduled_by_callback(w, schedule)


def test_minus_infinity_and_past_deadlines_mixed():
    def schedule(w, record):
        return [w.call_at(-math.inf if i % 2 else -1 - i * 1e-9, record, i) for i in range(N)]

    with pywheel.Wheel() as w:
        run_scheduled_by_callback(w, schedule)


def test_one_long_tick_comes_in_parts():
    # tick 5 s (more than 2**32 ns): 10,000 timers due in one tick, 1,000
    # distinct deadlines 1 us apart, scheduled out of order, 10 to each
    def schedule(w, record):
        base = w.time() + 0.01
        return [w.call_at(base + ((i * 7919) % 1000) * 1e-6, record, i) for i in range(N)]

    with pywheel.Wheel(tick=5.0) as w:
        run_scheduled_by_callback(w, schedule)
