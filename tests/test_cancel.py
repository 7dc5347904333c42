"""Cancel (docs/explanation/guarantees.md, "Cancel"): cancel() returns True if
this call stopped a future run, False otherwise; True means the callback
never started, also when another thread races the wheel's own, and a timer
cancelled by an earlier callback of its batch does not run."""

import random
import threading

from helpers import conserved, wait_for

# ---------------------------------------------------------------------------
# cancel


def test_cancel_before_firing(manual):
    ran = []
    h = manual.call_later(0.01, ran.append, 1)
    assert not h.cancelled()
    assert h.cancel() is True
    assert h.cancelled()
    assert h.cancel() is False  # twice
    assert h.cancelled()
    assert len(manual) == 0
    assert manual.advance(1) == 0
    assert ran == []
    s = manual.stats()
    assert (s["cancelled"], s["fired"], s["pending"]) == (1, 0, 0)


def test_cancel_after_firing(manual):
    ran = []
    h = manual.call_later(0.01, ran.append, 1)
    assert manual.advance(0.01) == 1
    assert h.cancel() is False
    assert not h.cancelled()
    assert ran == [1]
    assert manual.stats()["cancelled"] == 0


def test_cancel_a_later_timer_of_the_same_batch(manual):
    ran = []
    b = None
    outcome = []

    def a():
        ran.append("a")
        outcome.append(b.cancel())

    manual.call_at(0.005, a)
    b = manual.call_at(0.005, ran.append, "b")
    manual.call_at(0.005, ran.append, "c")
    assert manual.advance(0.01) == 2
    assert ran == ["a", "c"]
    assert outcome == [True]
    assert b.cancelled()
    assert conserved(manual)


def test_one_shot_cancelling_itself_returns_false(manual):
    out = []
    h = manual.call_later(0.001, lambda: out.append(h.cancel()))
    manual.advance(0.01)
    assert out == [False]
    assert not h.cancelled()


def test_cancel_from_another_thread_while_wheel_runs(wheel):
    ran = []
    sentinel = threading.Event()
    h = wheel.call_later(0.3, ran.append, "cancelled one")
    wheel.call_later(0.4, sentinel.set)
    wheel.call_later(0.001, ran.append, "early")  # the wheel thread is busy meanwhile
    out = []
    t = threading.Thread(target=lambda: out.append(h.cancel()))
    t.start()
    t.join(5)
    assert out == [True]
    assert h.cancelled()
    assert sentinel.wait(5)
    assert ran == ["early"]


def test_cancel_true_means_never_started_stress(wheel):
    rng = random.Random(4)
    n = 2000
    ran = []
    lock = threading.Lock()

    def cb(i):
        with lock:
            ran.append(i)

    handles = [wheel.call_later(rng.uniform(0, 0.01), cb, i) for i in range(n)]
    results = {}
    for i in range(0, n, 2):
        results[i] = handles[i].cancel()
    done = threading.Event()
    wheel.call_later(0.05, done.set)
    assert done.wait(5)
    assert wait_for(lambda: len(wheel) == 0, timeout=5.0)
    assert len(ran) == len(set(ran))  # nothing ran twice
    expected = {i for i in range(n) if not results.get(i, False)}
    assert set(ran) == expected
    for i, r in results.items():
        assert handles[i].cancelled() is r
    assert conserved(wheel)


def test_cancel_from_a_racing_thread(wheel):
    n = 2000
    ran = set()
    handles = [wheel.call_later((i % 50) * 0.0002, ran.add, i) for i in range(n)]
    results = {}

    def canceller():
        for i in range(1, n, 2):
            results[i] = handles[i].cancel()

    t = threading.Thread(target=canceller)
    t.start()
    t.join(5)
    done = threading.Event()
    wheel.call_later(0.05, done.set)
    assert done.wait(5)
    assert ran == {i for i in range(n) if not results.get(i, False)}
