"""The clock (docs/explanation/guarantees.md, "Clock") and the ManualWheel that
moves it (docs/howto/manual-wheel.md): a threaded
wheel's time() is time.monotonic() and runs its callbacks with their
arguments (a dropped handle too); a ManualWheel starts where it is told, runs
each timer at its tick, never goes backwards, and says when its next
deadline is."""

import gc
import threading
import time

import pytest
from helpers import wait_for

from pywheel import ManualWheel, TimerHandle

# ---------------------------------------------------------------------------
# basic firing, clock


def test_threaded_wheel_fires_with_positional_args(wheel):
    done = threading.Event()
    got = []

    def cb(*args):
        got.append((args, threading.get_ident()))
        done.set()

    h = wheel.call_later(0.01, cb, 1, "two", None)
    assert isinstance(h, TimerHandle)
    assert done.wait(5)
    assert got[0][0] == (1, "two", None)
    assert got[0][1] != threading.get_ident()  # ran on the wheel's own thread
    assert wait_for(lambda: wheel.stats()["fired"] == 1, timeout=5.0)
    assert not h.cancelled()
    assert h.cancel() is False
    assert len(wheel) == 0


def test_threaded_call_at_and_no_args(wheel):
    done = threading.Event()
    h = wheel.call_at(wheel.time() + 0.01, done.set)
    assert done.wait(5)
    assert time.monotonic() >= h.when()


def test_dropped_handle_still_runs(manual):
    ran = []
    manual.call_later(0.005, ran.append, "x")  # handle not kept: the wheel owns it
    gc.collect()
    assert manual.advance(0.01) == 1
    assert ran == ["x"]


def test_wheel_clock_is_time_monotonic(wheel):
    a = time.monotonic()
    t = wheel.time()
    b = time.monotonic()
    assert a <= t <= b
    a = time.monotonic_ns()
    t = wheel.time_ns()
    b = time.monotonic_ns()
    assert a <= t <= b


def test_manual_clock_starts_where_told():
    w = ManualWheel(tick=0.01, start=5.0)
    assert w.time() == 5.0
    assert w.time_ns() == 5_000_000_000
    w.advance(0.25)
    assert w.time_ns() == 5_250_000_000
    w.advance_to(7)
    assert w.time() == 7.0
    h = w.call_later(1, print)
    assert h.when() == 8.0
    w.close()


# ---------------------------------------------------------------------------
# ManualWheel


def test_advance_returns_count_and_runs_new_timers_at_their_tick(manual):
    ran = []

    def spawner():
        ran.append(("spawner", manual.time_ns()))
        manual.call_later(0.003, lambda: ran.append(("child", manual.time_ns())))
        manual.call_later(0.5, lambda: ran.append(("too late", manual.time_ns())))

    manual.call_at(0.002, spawner)
    manual.call_at(0.004, lambda: ran.append(("other", manual.time_ns())))
    assert manual.advance(0.01) == 3
    assert ran == [("spawner", 2_000_000), ("other", 4_000_000), ("child", 5_000_000)]
    assert manual.time_ns() == 10_000_000
    assert len(manual) == 1


def test_advance_to_and_time_outside_callbacks(manual):
    assert manual.advance_to(0.0025) == 0
    assert manual.time_ns() == 2_500_000
    h = manual.call_later(0.001, print)  # 0.0035 -> due at tick 0.004
    assert h.when() == pytest.approx(0.0035)
    assert manual.next_deadline() == pytest.approx(0.004)
    assert manual.advance_to(0.0039) == 0  # not yet: its tick boundary is 0.004
    manual.set_exception_handler(None)
    h.cancel()


def test_time_cannot_go_backwards(manual):
    manual.advance(1)
    with pytest.raises(ValueError):
        manual.advance(-0.001)
    with pytest.raises(ValueError):
        manual.advance_to(0.5)
    with pytest.raises(ValueError):
        manual.advance(float("nan"))
    with pytest.raises(ValueError):
        manual.advance(float("inf"))
    with pytest.raises(TypeError):
        manual.advance("1")
    with pytest.raises(TypeError):
        manual.advance_to(None)
    assert manual.time() == 1.0
    assert manual.advance(0) == 0
    assert manual.advance_to(1.0) == 0


def test_next_deadline_and_advance_to_next(manual):
    assert manual.next_deadline() is None
    assert manual.advance_to_next() == 0
    assert manual.time() == 0.0
    ran = []
    manual.call_at(0.0071, ran.append, "a")
    manual.call_at(0.0075, ran.append, "b")
    manual.call_at(0.02, ran.append, "c")
    assert manual.next_deadline() == pytest.approx(0.008)
    assert manual.advance_to_next() == 2
    assert manual.time_ns() == 8_000_000
    assert ran == ["a", "b"]
    assert manual.next_deadline() == pytest.approx(0.02)
    assert manual.advance_to_next() == 1
    assert manual.time_ns() == 20_000_000
    assert manual.next_deadline() is None
    # an overdue timer: next_deadline is now
    manual.call_later(-1, ran.append, "d")
    assert manual.next_deadline() == pytest.approx(0.02)
    assert manual.advance_to_next() == 1
    assert ran == ["a", "b", "c", "d"]


def test_callback_scheduling_into_the_past_runs_in_the_next_batch(manual):
    ran = []

    def a():
        ran.append(("a", manual.time_ns()))
        manual.call_later(-1, lambda: ran.append(("past", manual.time_ns())))
        manual.call_later(0, lambda: ran.append(("zero", manual.time_ns())))

    manual.call_at(0.002, a)
    manual.call_at(0.002, lambda: ran.append(("b", manual.time_ns())))
    manual.call_at(0.002, lambda: ran.append(("c", manual.time_ns())))
    assert manual.advance(0.01) == 5
    assert ran == [
        ("a", 2_000_000),
        ("b", 2_000_000),
        ("c", 2_000_000),
        ("past", 2_000_000),
        ("zero", 2_000_000),
    ]
    assert manual.stats()["batches"] == 2


def test_callback_scheduling_into_the_past_threaded(wheel):
    ran = []
    done = threading.Event()
    t0 = wheel.time() + 0.01

    def a():
        ran.append("a")
        wheel.call_later(-1, ran.append, "past")

    wheel.call_at(t0, a)
    wheel.call_at(t0, ran.append, "b")
    wheel.call_at(t0 + 0.02, done.set)
    assert done.wait(5)
    assert ran == ["a", "b", "past"]
