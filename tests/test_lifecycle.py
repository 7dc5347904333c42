"""Lifecycle paths that can crash or hang a process: each runs in a subprocess
with a timeout (exit, fork), or watches the wheel's own thread (drop, idle)."""

import gc
import os
import threading
import time

import pytest
from helpers import PROC_TASKS, run_script, thread_count

import pywheel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# ---- interpreter exit ----------------------------------------------------


def test_exit_with_repeating_timers_pending_exits_zero_quickly():
    start = time.monotonic()
    proc = run_script(
        """
        import pywheel, time
        w = pywheel.Wheel()
        for i in range(100):
            w.call_every(0.001, lambda: None)
        w.call_later(3600, print, "never")
        time.sleep(0.1)
        print("bye")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "bye"
    assert proc.stderr == ""
    assert time.monotonic() - start < 10


def test_exit_status_is_untouched():
    proc = run_script(
        """
        import pywheel, sys
        w = pywheel.Wheel()
        w.call_every(0.001, lambda: None)
        sys.exit(3)
        """
    )
    assert proc.returncode == 3, proc.stderr


def test_exit_with_a_callback_still_running():
    # The callback is mid-flight (sleeping without the GIL) when the main
    # thread returns: exit waits for it (well inside the grace) and exits 0.
    proc = run_script(
        """
        import pywheel, time
        w = pywheel.Wheel()
        w.call_later(0, time.sleep, 0.5)
        time.sleep(0.1)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_exit_with_a_callback_outliving_the_grace_period():
    proc = run_script(
        """
        import pywheel, time
        pywheel.EXIT_GRACE = 0.2
        w = pywheel.Wheel()
        w.call_later(0, time.sleep, 30)
        time.sleep(0.1)
        """,
        timeout=20,
    )
    assert proc.returncode == 0, proc.stderr


def test_exit_with_dropped_wheels_and_many_live_ones():
    proc = run_script(
        """
        import pywheel
        keep = [pywheel.Wheel() for _ in range(20)]
        for w in keep:
            w.call_every(0.002, lambda: None)
        for _ in range(20):
            pywheel.Wheel().call_later(0.001, print)
        """
    )
    assert proc.returncode == 0, proc.stderr


# ---- dropping a wheel ----------------------------------------------------


def test_dropped_wheel_stops_its_thread():
    gc.collect()
    base = thread_count()
    w = pywheel.Wheel()
    handles = [w.call_later(60, print) for _ in range(100)]
    w.call_every(0.001, lambda: None)
    assert wait_for(lambda: thread_count() == base + 1)
    del w
    assert wait_for(lambda: thread_count() == base), "wheel thread still running"
    # Its handles were cancelled when the wheel went away.
    assert all(h.cancelled() for h in handles)


def test_wheel_in_a_reference_cycle_through_its_callback_is_collected():
    gc.collect()
    base = thread_count()

    class Service:
        def __init__(self):
            self.wheel = pywheel.Wheel()
            self.handle = self.wheel.call_every(0.01, self.tick)

        def tick(self):
            pass

    svc = Service()
    assert wait_for(lambda: thread_count() == base + 1)
    del svc
    gc.collect()
    assert wait_for(lambda: thread_count() == base), "cycle kept the wheel alive"


def test_last_reference_dropped_inside_a_callback():
    gc.collect()
    base = thread_count()
    done = threading.Event()
    box = {"w": pywheel.Wheel()}

    def drop():
        del box["w"]  # the wheel's last reference, on its own thread
        done.set()

    box["w"].call_later(0.01, drop)
    assert done.wait(5)
    assert wait_for(lambda: thread_count() == base)


def test_many_wheels_created_and_dropped():
    gc.collect()
    base = thread_count()
    for _ in range(200):
        w = pywheel.Wheel()
        w.call_later(0, lambda: None)
        w.call_later(10, lambda: None)
    del w
    assert wait_for(lambda: thread_count() == base, timeout=10)


# ---- idle ----------------------------------------------------------------


def thread_switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])


def test_idle_wheel_makes_no_wakeups():
    # The wheel's own count everywhere; the kernel's count of its thread's
    # context switches too where /proc/self/task/<tid>/status says it (Linux).
    def tasks():
        return set(os.listdir("/proc/self/task")) if PROC_TASKS else set()

    before = tasks()
    w = pywheel.Wheel()
    try:
        tid = None
        if PROC_TASKS:
            assert wait_for(lambda: len(tasks() - before) == 1)
            (tid,) = {int(t) for t in tasks() - before}
        w.call_later(60, print)
        time.sleep(0.1)  # let it settle on the 60 s deadline
        wakeups = w.stats()["wakeups"]
        switches = thread_switches(tid) if tid is not None else None
        time.sleep(2)
        assert w.stats()["wakeups"] == wakeups
        if tid is not None:
            assert thread_switches(tid) == switches
    finally:
        w.close()


def test_idle_wheel_with_nothing_pending_makes_no_wakeups():
    w = pywheel.Wheel()
    try:
        time.sleep(0.05)
        wakeups = w.stats()["wakeups"]
        time.sleep(1)
        assert w.stats()["wakeups"] == wakeups == 0
    finally:
        w.close()


def test_new_earliest_deadline_wakes_a_sleeping_thread():
    # Lost wake-up check: the thread sleeps toward a deadline 10 s away.
    w = pywheel.Wheel()
    try:
        w.call_later(10, print)
        time.sleep(0.05)
        fired = threading.Event()
        t0 = time.monotonic()
        w.call_later(0.001, fired.set)
        assert fired.wait(5)
        assert time.monotonic() - t0 < 2
    finally:
        w.close()


# ---- fork ----------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_wheel_is_closed_and_new_wheels_work():
    proc = run_script(
        """
        import os, sys, time, threading, pywheel
        w = pywheel.Wheel()
        ran = []
        w.call_every(0.001, lambda: ran.append(1))
        w.call_later(3600, print)
        time.sleep(0.05)
        pid = os.fork()
        if pid == 0:
            try:
                w.call_later(0, print)
            except RuntimeError as e:
                assert "parent" in str(e), e
            else:
                os._exit(10)
            assert w.closed and len(w) == 0
            w2 = pywheel.Wheel()
            ok = threading.Event()
            w2.call_later(0.01, ok.set)
            os._exit(0 if ok.wait(5) else 11)
        _, status = os.waitpid(pid, 0)
        n = len(ran)
        time.sleep(0.05)
        assert len(ran) > n, "parent's wheel stopped"
        assert not w.closed
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_while_a_callback_runs():
    proc = run_script(
        """
        import os, sys, time, pywheel
        w = pywheel.Wheel()
        w.call_every(0.001, time.sleep, 0.01)   # the wheel thread is mostly mid-callback
        time.sleep(0.05)
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                os._exit(0 if w.closed else 12)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status):
                sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_multiprocessing_fork_start_method():
    proc = run_script(
        """
        import multiprocessing as mp, threading, pywheel

        def child(q):
            w = pywheel.Wheel()
            ev = threading.Event()
            w.call_later(0.01, ev.set)
            q.put(ev.wait(5))

        if __name__ == "__main__":
            parent = pywheel.Wheel()
            parent.call_every(0.001, lambda: None)
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            assert q.get(timeout=10) is True
            p.join(10)
            assert p.exitcode == 0
        """
    )
    assert proc.returncode == 0, proc.stderr
