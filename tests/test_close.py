"""Close (docs/explanation/guarantees.md, "Close"): close() cancels every timer
that has not started and returns them in deadline order, refuses new timers
afterwards, works as a context manager, and waits for a running callback
(up to its timeout), also when called from a callback or from several
threads at once.  The cases that can hang or crash a process (a close from a
callback, then exit; a close racing a slow callback) run in child
interpreters with a timeout.  close() from another wheel's callback:
test_close_between_wheels.py."""

import threading
import time

import pytest
from helpers import clean_exit, conserved, lines, needs_thread_count, run

from pywheel import ManualWheel, Wheel

# ---------------------------------------------------------------------------
# close


def test_close_manual_returns_never_run_handles_sorted(manual):
    ran = []
    a = manual.call_later(0.3, ran.append, "a")
    b = manual.call_later(0.1, ran.append, "b")
    c = manual.call_later(0.2, ran.append, "c")
    d = manual.call_later(float("inf"), ran.append, "d")
    e = manual.call_every(0.05, ran.append, "e")
    f = manual.call_later(0.01, ran.append, "f")
    manual.advance(0.01)
    assert ran == ["f"]
    assert not manual.closed
    out = manual.close()
    assert out == [e, b, c, a, d]
    assert all(h.cancelled() for h in out)
    assert not f.cancelled()
    assert manual.closed
    assert len(manual) == 0
    assert manual.close() == []
    assert manual.next_deadline() is None
    assert manual.advance(1) == 0
    assert ran == ["f"]
    s = manual.stats()
    assert (s["cancelled"], s["pending"]) == (5, 0)
    assert conserved(manual)


def test_close_threaded(wheel):
    ran = []
    a = wheel.call_later(30, ran.append, "a")
    b = wheel.call_later(20, ran.append, "b")
    r = wheel.call_every(10, ran.append, "r")
    out = wheel.close()
    assert out == [r, b, a]
    assert all(h.cancelled() for h in out)
    assert wheel.closed
    assert len(wheel) == 0
    assert wheel.close() == []
    assert wheel.close(timeout=0.1) == []


@pytest.mark.parametrize("kind", ["manual", "threaded"])
def test_schedule_after_close_raises(kind):
    w = ManualWheel() if kind == "manual" else Wheel()
    w.close()
    before = w.stats()["scheduled"]
    with pytest.raises(RuntimeError):
        w.call_later(1, print)
    with pytest.raises(RuntimeError):
        w.call_at(1, print)
    with pytest.raises(RuntimeError):
        w.call_every(1, print)
    assert w.stats()["scheduled"] == before
    assert len(w) == 0


@pytest.mark.parametrize("cls", [Wheel, ManualWheel])
def test_context_manager_closes(cls):
    with cls() as w:
        assert isinstance(w, cls)
        h = w.call_later(10, print)
        assert not w.closed
    assert w.closed
    assert h.cancelled()
    assert len(w) == 0


def test_context_manager_does_not_swallow_exceptions():
    with pytest.raises(ZeroDivisionError):
        with Wheel() as w:
            w.call_later(10, print)
            1 / 0  # noqa: B018
    assert w.closed


def test_close_from_inside_a_callback_threaded(wheel):
    ran = []
    closed_with = []
    done = threading.Event()

    def closer():
        closed_with.append(wheel.close())
        done.set()

    t = wheel.time() + 0.01
    wheel.call_at(t, closer)
    b = wheel.call_at(t, ran.append, "b")  # same deadline: same batch, after closer
    c = wheel.call_later(0.05, ran.append, "c")
    assert done.wait(5)
    assert wheel.closed
    assert closed_with == [[b, c]]  # b was in the running batch but had not started
    assert b.cancelled() and c.cancelled()
    assert wheel.close() == []  # waits for the thread to leave
    time.sleep(0.08)
    assert ran == []
    with pytest.raises(RuntimeError):
        wheel.call_later(0, print)


def test_close_from_inside_a_callback_manual(manual):
    ran = []
    closed_with = []
    manual.call_at(0.002, lambda: closed_with.append(manual.close()))
    b = manual.call_at(0.002, ran.append, "b")
    c = manual.call_at(0.005, ran.append, "c")
    r = manual.call_every(0.001, ran.append, "r")
    assert manual.advance(0.01) == 2  # r at 0.001, then the closer
    assert ran == ["r"]
    # sorted by (deadline, scheduling order): r's re-arm at 0.001 came after b
    assert closed_with == [[b, r, c]]
    assert manual.closed
    assert all(h.cancelled() for h in (b, c, r))


def test_close_from_a_repeating_callback_manual(manual):
    closed_with = []
    r = manual.call_every(0.002, lambda: closed_with.append(manual.close()))
    assert manual.advance(0.02) == 1
    assert closed_with == [[r]]  # the running repeating timer never runs again
    assert r.cancelled()


def test_close_waits_for_the_running_callback(wheel):
    started = threading.Event()
    finished = []

    def slow():
        started.set()
        time.sleep(0.1)
        finished.append(True)

    wheel.call_later(0, slow)
    later = wheel.call_later(0.001, print)
    assert started.wait(5)
    out = wheel.close()
    assert finished == [True]  # close() returned after the running batch
    assert out == [later]


# ---------------------------------------------------------------------------
# close() from inside a callback and from other threads


def test_close_from_inside_a_callback_then_exit():
    proc = run(
        """
        w = pywheel.Wheel()
        done = threading.Event()
        later = [w.call_later(60, say, "never") for _ in range(3)]

        def closer():
            out = w.close()
            say("closed from callback", len(out), all(h.cancelled() for h in out))
            try:
                w.call_later(0, say, "never")
            except RuntimeError:
                say("refused after close")
            done.set()

        w.call_every(0.005, closer)
        assert done.wait(5)
        say("close from main", w.close())
        """
    )
    clean_exit(proc)
    # the three pending and the running repeating one
    assert lines(proc) == [
        "closed from callback 4 True",
        "refused after close",
        "close from main []",
    ]
    assert proc.stderr == ""


@needs_thread_count
def test_close_from_a_callback_that_drops_the_last_reference():
    proc = run(
        """
        box = {"w": pywheel.Wheel()}
        done = threading.Event()
        base = None

        def closer():
            w = box.pop("w")
            w.close()
            del w  # the wheel's last reference, on its own thread, after close()
            done.set()

        box["w"].call_later(0.005, closer)
        box["w"].call_every(0.001, lambda: None)
        base = thread_count()
        assert done.wait(5)
        say("thread gone", wait_for(lambda: thread_count() == base - 1))
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["thread gone True"]
    assert proc.stderr == ""


@pytest.mark.parametrize("slow_kind", ["sleeping", "busy-python"])
def test_close_from_another_thread_while_a_slow_callback_runs(slow_kind):
    proc = run(
        f"""
        w = pywheel.Wheel()
        slow_done = threading.Event()
        started = slow_callback(w, 0.4, slow_done.set, busy="{slow_kind}" == "busy-python")
        pending = [w.call_later(d, say, "never") for d in (30, 10, 20)]
        rep = w.call_every(0.001, say, "never: repeating")
        assert started.wait(5)
        result = {{}}

        def closer():
            t0 = time.monotonic()
            out = w.close()
            result["out"] = out
            result["after_slow"] = slow_done.is_set()
            result["waited"] = time.monotonic() - t0

        t = threading.Thread(target=closer)
        t.start()
        assert wait_for(lambda: w.closed)
        try:  # the main thread is not blocked meanwhile
            w.call_later(0, say, "never")
        except RuntimeError as e:
            say("main refused:", "closed" in str(e))
        say("cancel after close", [h.cancel() for h in pending], len(w))
        t.join(10)
        out = result["out"]
        say("close returned after the slow callback", result["after_slow"])
        say("returned", out == [rep] + sorted(pending, key=lambda h: h.when()))
        say("all cancelled", all(h.cancelled() for h in out))
        say("second close", w.close())
        """
    )
    clean_exit(proc)
    assert lines(proc) == [
        "main refused: True",
        "cancel after close [False, False, False] 0",
        "close returned after the slow callback True",
        "returned True",
        "all cancelled True",
        "second close []",
    ]
    assert proc.stderr == ""


def test_concurrent_close_from_four_threads_while_a_slow_callback_runs():
    proc = run(
        """
        w = pywheel.Wheel()
        slow_done = threading.Event()
        started = slow_callback(w, 0.3, slow_done.set)
        pending = [w.call_later(60, say, "never") for _ in range(5)]
        assert started.wait(5)
        results = []
        barrier = threading.Barrier(4)

        def closer():
            barrier.wait()
            out = w.close()
            results.append((len(out), slow_done.is_set()))

        ts = [threading.Thread(target=closer) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        say(sorted(results))
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["[(0, True), (0, True), (0, True), (5, True)]"]


def test_close_with_a_timeout_while_a_slow_callback_runs():
    proc = run(
        """
        w = pywheel.Wheel()
        started = slow_callback(w, 0.6)
        h = w.call_later(60, say, "never")
        assert started.wait(5)
        t0 = time.monotonic()
        out = w.close(timeout=0.1)
        waited = time.monotonic() - t0
        say("returned early", 0.05 < waited < 0.5, out == [h], w.closed)
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["returned early True True True", "slow done"]
