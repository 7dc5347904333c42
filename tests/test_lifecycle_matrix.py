"""The lifecycle matrix of issue 6, point 4: each case in its own interpreter,
with a timeout, because each can hang or crash a process.

Exit (pending one-shot and repeating timers, some due during shutdown; sys.exit,
SIGINT and an unhandled exception while timers run; a callback still running
when the main thread returns; close() in a finalizer), close() from inside a
callback and from other threads while a slow callback runs, many wheels created
and dropped, fork while the wheel thread is idle, while it runs a callback, from
inside a callback, while another thread advances a ManualWheel, nested, and
multiprocessing with the fork start method; subinterpreters; processes started
from callbacks.  Cases tests/test_lifecycle.py already covers (exit status, a
callback outliving the grace, the basic fork and multiprocessing checks) are not
repeated; these add what they leave out.

Each script prints what happened; the test reads it back.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

# Shared by every script: helpers to print at once and to wait for something.
PRELUDE = """
import os, sys, time, threading, gc
import pywheel

def say(*args):
    print(*args, flush=True)

def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return predicate()
        time.sleep(0.005)
    return True

def thread_count():
    return len(os.listdir("/proc/self/task"))
"""


# Prepended to the scripts that fork a process with live wheel threads: that
# is what they test.  3.12+ warns about exactly this (DeprecationWarning: "This
# process (pid=...) is multi-threaded, use of fork() may lead to deadlocks in
# the child"), which the tests would read as unexpected stderr; that warning,
# and no other, is silenced.
FORK_ON_PURPOSE = r"""
import warnings
warnings.filterwarnings(
    "ignore",
    message=r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks",
    category=DeprecationWarning,
)
"""


def run(code: str, timeout: float = 30.0, *, forks: bool = False) -> subprocess.CompletedProcess:
    env = child_env()
    script = PRELUDE + (FORK_ON_PURPOSE if forks else "") + textwrap.dedent(code)
    try:
        return subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired as e:  # a hang: say where
        pytest.fail(f"hung (> {timeout} s); stdout so far:\n{e.stdout}\nstderr:\n{e.stderr}")


def run_forking(code: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return run(code, timeout, forks=True)


def lines(proc) -> list[str]:
    return proc.stdout.splitlines()


def clean_exit(proc, code: int = 0) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Fatal Python error" not in proc.stderr, proc.stderr
    assert "Segmentation fault" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------
# interpreter exit


def test_exit_with_timers_due_during_shutdown():
    # A user atexit hook (registered after importing pywheel, so it runs
    # first) lets timers fall due while it sleeps: they run.  Then it leaves
    # a slow callback running and a timer due while pywheel's own hook waits
    # for that callback: the slow one finishes, the due one never runs.
    proc = run(
        """
        import atexit
        w = pywheel.Wheel()
        runs = []
        w.call_every(0.001, runs.append, 1)
        w.call_every(0.01, lambda: None)
        w.call_later(3600, say, "never: an hour away")
        w.call_later(float("inf"), say, "never: infinite")

        def slow(started):
            started.set()
            time.sleep(0.5)
            say("slow done")

        def hook():
            say("hook start", w.closed)
            ran = threading.Event()
            w.call_later(0.05, lambda: (say("due during the user's atexit hook"), ran.set()))
            assert ran.wait(5)
            started = threading.Event()
            w.call_later(0, slow, started)
            assert started.wait(5)
            w.call_later(0.1, say, "never: due during pywheel's grace")
            say("hook end", len(runs) > 0)

        atexit.register(hook)
        time.sleep(0.05)
        say("main returns")
        """
    )
    clean_exit(proc)
    assert lines(proc) == [
        "main returns",
        "hook start False",
        "due during the user's atexit hook",
        "hook end True",
        "slow done",
    ]
    assert proc.stderr == ""


@pytest.mark.parametrize("exit_after", [0.0, 0.02, 0.05])
def test_exit_with_one_shots_falling_due_around_the_exit(exit_after):
    # 3000 one-shots spread over 0-100 ms and repeating timers; the main
    # thread returns somewhere in that window.  Every one that ran, ran once;
    # the exit is clean and prompt.
    proc = run(
        f"""
        import atexit
        w = pywheel.Wheel()
        ran = []
        t0 = w.time()
        for i in range(3000):
            w.call_at(t0 + (i % 100) * 0.001, ran.append, i)
        for k in range(20):
            w.call_every(0.001 + k * 0.0005, lambda: None)
        def report():
            # one snapshot: the wheel's thread may still append while this
            # runs (pywheel's own exit hook, registered first, runs after it)
            seen = list(ran)
            say("ran", len(seen), len(set(seen)) == len(seen))

        atexit.register(report)
        time.sleep({exit_after})
        """
    )
    clean_exit(proc)
    (line,) = lines(proc)
    word, count, unique = line.split()
    assert word == "ran" and unique == "True" and 0 <= int(count) <= 3000
    assert proc.stderr == ""


def test_sys_exit_while_a_callback_runs():
    # The main thread calls sys.exit(7) while a callback is mid-flight: the
    # status is 7 and the callback gets to finish (within the grace).
    proc = run(
        """
        w = pywheel.Wheel()
        started = threading.Event()

        def slow():
            started.set()
            time.sleep(0.3)
            say("slow done")

        w.call_later(0, slow)
        w.call_every(0.001, lambda: None)
        assert started.wait(5)
        sys.exit(7)
        """
    )
    clean_exit(proc, 7)
    assert lines(proc) == ["slow done"]
    assert proc.stderr == ""


def test_sys_exit_with_a_message_while_timers_run():
    proc = run(
        """
        w = pywheel.Wheel()
        w.call_every(0.001, lambda: None)
        w.call_later(0.5, say, "never")
        time.sleep(0.02)
        sys.exit("bye from main")
        """
    )
    clean_exit(proc, 1)
    assert proc.stderr.strip() == "bye from main"
    assert proc.stdout == ""


def test_unhandled_exception_in_the_main_thread_while_timers_run():
    proc = run(
        """
        w = pywheel.Wheel()
        started = threading.Event()

        def slow():
            started.set()
            time.sleep(0.2)
            say("slow done")

        w.call_every(0.001, lambda: None)
        w.call_later(0, slow)
        w.call_later(60, say, "never")
        assert started.wait(5)
        raise ValueError("boom in main")
        """
    )
    clean_exit(proc, 1)
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.strip().endswith("ValueError: boom in main")
    assert "timer callback" not in proc.stderr
    assert lines(proc) == ["slow done"]


def test_sigint_while_timers_run_goes_to_the_main_thread():
    # Wheel threads block every signal: Ctrl-C interrupts the main thread,
    # and an unhandled KeyboardInterrupt ends the process as it would without
    # pywheel (killed by SIGINT, after the atexit hooks).
    proc = run(
        """
        import signal
        # Ctrl-C as a user's process has it, even when this test run was
        # started with SIGINT ignored (a background job), which children inherit
        signal.signal(signal.SIGINT, signal.default_int_handler)
        w = pywheel.Wheel()
        w.call_every(0.001, lambda: None)
        hit = []
        w.call_every(0.002, lambda: hit.append(threading.current_thread().name))
        assert wait_for(lambda: hit)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            say("not interrupted")
        except KeyboardInterrupt:
            say("interrupted in", threading.current_thread().name, len(hit) > 0)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        """
    )
    assert proc.returncode == -signal.SIGINT, (proc.returncode, proc.stderr)
    assert lines(proc) == ["interrupted in MainThread True"]
    assert "KeyboardInterrupt" in proc.stderr
    assert "Fatal Python error" not in proc.stderr


def test_system_exit_in_a_callback_does_not_end_the_process():
    # README "Errors": on a threaded wheel SystemExit and KeyboardInterrupt
    # from a callback are reported like any other error.
    proc = run(
        """
        w = pywheel.Wheel()
        done = threading.Event()
        w.call_later(0.001, sys.exit, 5)
        w.call_later(0.002, lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
        w.call_later(0.01, done.set)
        assert done.wait(5)
        say("alive", w.stats()["errors"])
        """
    )
    clean_exit(proc, 0)
    assert lines(proc) == ["alive 2"]
    assert proc.stderr.count("Exception in timer callback") == 2
    assert "SystemExit: 5" in proc.stderr and "KeyboardInterrupt" in proc.stderr


def test_callback_busy_in_python_when_main_returns_finishes():
    # A callback running pure Python (holding the GIL between switches) when
    # the main thread returns: the exit waits for it, within the grace.
    proc = run(
        """
        w = pywheel.Wheel()
        started = threading.Event()

        def busy():
            started.set()
            end = time.monotonic() + 0.3
            n = 0
            while time.monotonic() < end:
                n += 1
            say("busy done", n > 0)

        w.call_later(0, busy)
        w.call_later(0.001, say, "never: queued behind busy when the wheel closed")
        assert started.wait(5)
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["busy done True"]
    assert proc.stderr == ""


@pytest.mark.parametrize("kind", ["busy-forever", "sleep-then-python"])
def test_callback_past_the_grace_never_runs_python_again(kind):
    # Past pywheel.EXIT_GRACE the interpreter finalizes anyway; the callback
    # thread is stopped when it next asks for the GIL: no output, no crash.
    body = (
        "while True:\n                pass"
        if kind == "busy-forever"
        else 'time.sleep(1.0)\n            say("LATE")\n            [i for i in range(10**5)]'
    )
    t0 = time.monotonic()
    proc = run(
        f"""
        pywheel.EXIT_GRACE = 0.3
        w = pywheel.Wheel()
        started = threading.Event()

        def stuck():
            started.set()
            {body}

        w.call_later(0, stuck)
        w.call_every(0.001, lambda: None)
        assert started.wait(5)
        say("main returns")
        """,
        timeout=20,
    )
    clean_exit(proc)
    assert lines(proc) == ["main returns"]
    assert time.monotonic() - t0 < 10


# close() called during finalization (here from a __del__ run by module
# teardown) on a wheel whose callback outlived EXIT_GRACE: that thread is
# stopped inside take_gil() when it next asks for the GIL and never reports
# that it exited, so close() must not wait for it (it hung before 0a8134b).
def test_close_in_a_finalizer_after_the_grace_does_not_hang():
    proc = run(
        """
        pywheel.EXIT_GRACE = 0.1

        class Service:
            def __init__(self):
                self.w = pywheel.Wheel()
                self.w.call_later(0, time.sleep, 0.5)

            def __del__(self):
                self.w.close()
                say("closed in __del__")

        s = Service()
        time.sleep(0.1)
        say("main returns")
        """,
        timeout=2.5,
    )
    clean_exit(proc)
    assert lines(proc) == ["main returns", "closed in __del__"]


def test_exit_while_a_daemon_thread_hammers_the_wheel():
    # A daemon thread keeps scheduling and cancelling through the exit; once
    # the wheel is closed it gets RuntimeError.  It is the interpreter's to
    # stop: the exit is clean.
    proc = run(
        """
        w = pywheel.Wheel()
        refused = []

        def hammer():
            while True:
                try:
                    w.call_later(0.001, lambda: None)
                    w.call_later(0.5, lambda: None).cancel()
                except RuntimeError:
                    refused.append(1)
                    time.sleep(0)

        for _ in range(2):
            threading.Thread(target=hammer, daemon=True).start()
        time.sleep(0.1)
        say("main returns")
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["main returns"]
    assert proc.stderr == ""


def test_exit_while_another_thread_blocks_in_close():
    # A non-daemon thread is in close(), waiting for a slow callback: the
    # interpreter waits for that thread (threading's rule), then exits.
    proc = run(
        """
        w = pywheel.Wheel()
        started = threading.Event()

        def slow():
            started.set()
            time.sleep(0.3)
            say("slow done")

        w.call_later(0, slow)
        assert started.wait(5)
        threading.Thread(target=lambda: say("closed", w.close())).start()
        time.sleep(0.05)
        say("main returns")
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["main returns", "slow done", "closed []"]
    assert proc.stderr == ""


def test_exit_with_wheels_in_reference_cycles():
    proc = run(
        """
        class Service:
            def __init__(self):
                self.wheel = pywheel.Wheel()
                self.h = self.wheel.call_every(0.001, self.tick)
                self.n = 0

            def tick(self):
                self.n += 1

        services = [Service() for _ in range(10)]
        for s in services[:5]:
            s.me = s
        del services[:5]  # garbage only the collector can free
        say("main returns", wait_for(lambda: all(s.n > 0 for s in services)))
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["main returns True"]
    assert proc.stderr == ""


def test_wheel_wanted_after_pywheel_shut_down():
    # An atexit hook registered before pywheel was imported runs after
    # pywheel's own: a threaded Wheel made there would have nobody to stop it.
    # It must not hang or crash the exit (it may be refused).
    proc = run(
        """
        import atexit

        def late():
            try:
                w = pywheel.Wheel()
            except RuntimeError as e:
                say("refused:", e)
            else:
                w.call_every(0.001, lambda: None)
                time.sleep(0.02)
                say("late wheel ran", w.stats()["fired"] > 0)
            m = pywheel.ManualWheel()
            m.call_later(1, say, "manual still works")
            m.advance(1)

        atexit.unregister(pywheel._shutdown)
        atexit.register(late)
        atexit.register(pywheel._shutdown)  # hooks run last-in first-out: pywheel's first
        w = pywheel.Wheel()
        w.call_every(0.001, lambda: None)
        """
    )
    clean_exit(proc)
    out = lines(proc)
    assert out[-1] == "manual still works"
    assert len(out) == 2
    assert proc.stderr == ""


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
        started = threading.Event()
        slow_done = threading.Event()

        def slow():
            started.set()
            end = time.monotonic() + 0.4
            if "{slow_kind}" == "sleeping":
                time.sleep(0.4)
            else:
                while time.monotonic() < end:
                    pass
            slow_done.set()

        w.call_later(0, slow)
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
        started = threading.Event()
        slow_done = threading.Event()

        def slow():
            started.set()
            time.sleep(0.3)
            slow_done.set()

        w.call_later(0, slow)
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
        started = threading.Event()

        def slow():
            started.set()
            time.sleep(0.6)
            say("slow done")

        w.call_later(0, slow)
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


# ---------------------------------------------------------------------------
# many wheels


def test_many_wheels_created_and_dropped_from_many_threads():
    # 1000 wheels from 4 threads, dropped in every state: idle, with timers
    # pending, while a callback runs, from inside their own callback, closed.
    # Every wheel thread goes away: the thread count returns to its baseline.
    proc = run(
        """
        gc.collect()
        base = thread_count()

        def churn(seed):
            for i in range(250):
                w = pywheel.Wheel()
                kind = (seed + i) % 5
                if kind == 1:
                    w.call_later(60, say, "never")
                    w.call_every(0.001, lambda: None)
                elif kind == 2:
                    ev = threading.Event()
                    w.call_later(0, lambda ev=ev: (ev.set(), time.sleep(0.005)))
                    ev.wait(5)  # dropped while its callback runs
                elif kind == 3:
                    box = {"w": w}
                    ev = threading.Event()
                    box["w"].call_later(0, lambda box=box, ev=ev: (box.clear(), ev.set()))
                    del w
                    ev.wait(5)
                    continue
                elif kind == 4:
                    w.call_later(0, lambda: None)
                    w.close()
                del w

        ts = [threading.Thread(target=churn, args=(s,)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        gc.collect()
        say("back to baseline", wait_for(lambda: thread_count() == base, timeout=20))
        """,
        timeout=60,
    )
    clean_exit(proc)
    assert lines(proc) == ["back to baseline True"]
    assert proc.stderr == ""


# ---------------------------------------------------------------------------
# fork


FORK_CHILD_CHECKS = """
def child_checks(w, pending, repeating):
    # The inherited wheel is closed, says why, and costs nothing to close.
    say("child closed", w.closed, len(w), w.stats()["pending"])
    try:
        w.call_later(0, say, "never")
    except RuntimeError as e:
        say("child refused", "parent" in str(e))
    say("child handles cancelled", all(h.cancelled() for h in pending), repeating.cancelled())
    say("child cancel", [h.cancel() for h in pending[:2]])
    t0 = time.monotonic()
    with w:
        pass
    say("child close", w.close(), time.monotonic() - t0 < 1)
    # a new wheel works
    w2 = pywheel.Wheel()
    ev = threading.Event()
    w2.call_later(0.01, ev.set)
    say("child new wheel", ev.wait(5))
    # an inherited ManualWheel keeps working
    say("child manual", manual.advance(1), manual_ran)
    del w
    gc.collect()
"""


@needs_fork
@pytest.mark.parametrize("state", ["idle", "sleeping-callback", "busy-callback"])
def test_fork(state):
    # The child exits normally (atexit hooks and all), not through os._exit:
    # nothing may wait for the parent's thread there.  The parent's wheel is
    # unaffected: what was pending at the fork runs there, once.
    proc = run_forking(
        FORK_CHILD_CHECKS
        + textwrap.dedent(f"""
        state = "{state}"
        w = pywheel.Wheel()
        manual = pywheel.ManualWheel()
        manual_ran = []
        manual.call_later(0.5, manual_ran.append, "m")
        started = threading.Event()
        finished = threading.Event()

        def slow():
            started.set()
            end = time.monotonic() + 0.3
            if state == "sleeping-callback":
                time.sleep(0.3)
            else:
                while time.monotonic() < end:
                    pass
            finished.set()

        parent_runs = []
        pending = [w.call_later(1.0 + 0.01 * k, parent_runs.append, k) for k in range(5)]
        repeating = w.call_every(0.002, lambda: None)
        if state == "idle":
            time.sleep(0.05)
        else:
            w.call_later(0, slow)
            assert started.wait(5)
        pid = os.fork()
        if pid == 0:
            child_checks(w, pending, repeating)
            say("child exits")
            sys.exit(0)
        t0 = time.monotonic()
        _, status = os.waitpid(pid, 0)
        say("child status", os.waitstatus_to_exitcode(status), time.monotonic() - t0 < 10)
        if state != "idle":
            say("parent callback finished", finished.wait(5))
        say("parent runs", wait_for(lambda: len(parent_runs) == 5), sorted(parent_runs))
        say("parent wheel", w.closed, repeating.cancelled())
        """)
    )
    clean_exit(proc)
    out = lines(proc)
    child = [x for x in out if x.startswith("child") and not x.startswith("child status")]
    assert child == [
        "child closed True 0 0",
        "child refused True",
        "child handles cancelled True True",
        "child cancel [False, False]",
        "child close [] True",
        "child new wheel True",
        "child manual 1 ['m']",
        "child exits",
    ]
    parent = [x for x in out if not x.startswith("child") or x.startswith("child status")]
    expected = ["child status 0 True"]
    if state != "idle":
        expected.append("parent callback finished True")
    expected += ["parent runs True [0, 1, 2, 3, 4]", "parent wheel False False"]
    assert parent == expected
    assert proc.stderr == ""


@needs_fork
def test_fork_repeatedly_while_callbacks_run():
    # Forks at random phases of a busy wheel; each child drops the inherited
    # wheel, makes its own, and exits normally.
    proc = run_forking(
        """
        import random
        w = pywheel.Wheel()
        w.call_every(0.001, lambda: sum(range(1000)))
        w.call_every(0.003, time.sleep, 0.001)
        handles = [w.call_later(60, say, "never") for _ in range(10)]
        rng = random.Random(1)
        bad = 0
        for i in range(12):
            time.sleep(rng.uniform(0, 0.005))
            pid = os.fork()
            if pid == 0:
                ok = w.closed and all(h.cancelled() for h in handles)
                w2 = pywheel.Wheel()
                ev = threading.Event()
                w2.call_later(0, ev.set)
                ok = ok and ev.wait(5)
                del w
                gc.collect()
                sys.exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            bad += os.waitstatus_to_exitcode(status) != 0
        say("bad children", bad, "parent open", not w.closed)
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["bad children 0 parent open True"]
    assert proc.stderr == ""


@needs_fork
@pytest.mark.parametrize("child_ends", ["os._exit", "returns"])
def test_fork_from_inside_a_callback(child_ends):
    # The wheel thread itself forks: in the child that thread is the only
    # one.  Its wheel is closed there; a new wheel works; whether the child
    # leaves with os._exit or by returning from the callback, it terminates.
    proc = run_forking(
        f"""
        w = pywheel.Wheel()
        later = w.call_later(60, say, "never")
        got = {{}}
        forked = threading.Event()

        def forker():
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                msg = "closed" if w.closed and later.cancelled() else "OPEN"
                w2 = pywheel.Wheel()
                ev = threading.Event()
                w2.call_later(0, ev.set)
                say("child", msg, ev.wait(5))
                if "{child_ends}" == "os._exit":
                    os._exit(0)
                return
            got["pid"] = pid
            forked.set()

        w.call_later(0.005, forker)
        assert forked.wait(5)
        _, status = os.waitpid(got["pid"], 0)
        say("child status", os.waitstatus_to_exitcode(status))
        ev = threading.Event()
        w.call_later(0, ev.set)
        say("parent wheel works", ev.wait(5), not later.cancelled())
        """,
        timeout=30,
    )
    clean_exit(proc)
    assert lines(proc) == ["child closed True", "child status 0", "parent wheel works True True"]


@needs_fork
def test_fork_while_another_thread_advances_a_manual_wheel():
    # README: a ManualWheel keeps working in the child.  Forked while another
    # thread is inside advance() (its callback sleeping): in the child that
    # thread is gone; the timers of its unfinished batch are still pending
    # and a new advance() runs them, once.
    proc = run_forking(
        """
        m = pywheel.ManualWheel()
        ran = []
        started = threading.Event()

        def cb(i):
            ran.append(i)
            if i == 0:
                started.set()
                time.sleep(0.3)

        for i in range(5):
            m.call_at(0.001, cb, i)
        m.call_at(0.002, ran.append, "later")
        t = threading.Thread(target=m.advance, args=(0.01,))
        t.start()
        assert started.wait(5)
        pid = os.fork()
        if pid == 0:
            before = list(ran)
            n = m.advance(0.01)
            s = m.stats()
            ok = s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
            say("child", before, n, ran, ok)
            os._exit(0)
        os.waitpid(pid, 0)
        t.join(10)
        say("parent", ran)
        """
    )
    clean_exit(proc)
    assert lines(proc) == [
        "child [0] 5 [0, 1, 2, 3, 4, 'later'] True",
        "parent [0, 1, 2, 3, 4, 'later']",
    ]


@needs_fork
def test_nested_fork_while_wheels_run_callbacks():
    proc = run_forking(
        """
        def busy_wheel():
            w = pywheel.Wheel()
            w.call_every(0.001, lambda: None)
            started = threading.Event()
            w.call_later(0, lambda: (started.set(), time.sleep(0.1)))
            assert started.wait(5)
            return w

        w = busy_wheel()
        pid = os.fork()
        if pid == 0:
            w2 = busy_wheel()  # the child's own wheel, busy when it forks again
            pid2 = os.fork()
            if pid2 == 0:
                w3 = pywheel.Wheel()
                ev = threading.Event()
                w3.call_later(0, ev.set)
                sys.exit(0 if w.closed and w2.closed and ev.wait(5) else 4)
            _, status = os.waitpid(pid2, 0)
            fired = w2.stats()["fired"]
            ok = os.waitstatus_to_exitcode(status) == 0 and w.closed and not w2.closed
            ok = ok and wait_for(lambda: w2.stats()["fired"] > fired + 10)
            sys.exit(0 if ok else 5)
        _, status = os.waitpid(pid, 0)
        say("child", os.waitstatus_to_exitcode(status), "parent open", not w.closed)
        """
    )
    clean_exit(proc)
    assert lines(proc) == ["child 0 parent open True"]
    assert proc.stderr == ""


@needs_fork
def test_multiprocessing_fork_pool_while_the_parent_wheel_is_busy():
    proc = run_forking(
        """
        import multiprocessing as mp

        parent_wheel = pywheel.Wheel()
        parent_manual = pywheel.ManualWheel()
        parent_manual.call_later(1, lambda: None)

        def task(i):
            inherited = "closed" if parent_wheel.closed else "OPEN"
            try:
                parent_wheel.call_later(0, print)
                inherited += "/accepted"
            except RuntimeError:
                inherited += "/refused"
            w = pywheel.Wheel()
            ev = threading.Event()
            out = []
            w.call_later(0.001 * (i % 5), lambda: (out.append(i), ev.set()))
            ok = ev.wait(5)
            w.close()
            return (i, inherited, ok, out == [i], parent_manual.advance(1) in (0, 1))

        if __name__ == "__main__":
            started = threading.Event()
            parent_wheel.call_every(0.001, lambda: None)
            parent_wheel.call_later(0, lambda: (started.set(), time.sleep(0.2)))
            assert started.wait(5)
            ctx = mp.get_context("fork")
            with ctx.Pool(3) as pool:
                results = pool.map(task, range(12), chunksize=1)
            bad = [r for r in results if r[1:] != ("closed/refused", True, True, True)]
            say("tasks", len(results), "bad", bad)
            p = ctx.Process(target=task, args=(99,))
            p.start()
            p.join(10)
            say("process exit", p.exitcode)
            fired = parent_wheel.stats()["fired"]
            more = wait_for(lambda: parent_wheel.stats()["fired"] > fired + 10)
            say("parent still running", not parent_wheel.closed, more)
        """,
        timeout=60,
    )
    clean_exit(proc)
    assert lines(proc) == ["tasks 12 bad []", "process exit 0", "parent still running True True"]


# ---------------------------------------------------------------------------
# subinterpreters: each has its own pywheel module and atexit hook


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


needs_subinterp = pytest.mark.skipif(
    not (_has("_testcapi") and (_has("_interpreters") or _has("_xxsubinterpreters"))),
    reason="needs CPython's _testcapi and _interpreters (3.13+) or _xxsubinterpreters",
)


@needs_subinterp
def test_pywheel_refuses_to_load_in_a_subinterpreter():
    # Subinterpreters are refused at import (ImportError), whichever way they
    # are made; the main interpreter's wheels are unaffected, before and after,
    # and so is the exit status, with a subinterpreter left alive at exit.
    # (Earlier builds loaded there: a subinterpreter's exit then stopped every
    # interpreter from making wheels, a leftover one turned the exit status
    # into 0, and one ending under a slow callback aborted the process.)
    proc = run(
        """
        import _testcapi
        try:
            import _interpreters as interpreters  # 3.13 renamed it
        except ImportError:
            import _xxsubinterpreters as interpreters

        def run_in_new_interpreter(isolated, code):
            # The error that code raised there, as text ("" if none).
            if hasattr(interpreters, "new_config"):  # 3.13: configs; errors returned
                interp = interpreters.create("isolated" if isolated else "legacy")
                err = interpreters.run_string(interp, code)
                return err.formatted if err else ""
            interp = interpreters.create(isolated=isolated)
            try:
                interpreters.run_string(interp, code)
            except interpreters.RunFailedError as e:
                return str(e)
            return ""

        main_wheel = pywheel.Wheel()
        main_wheel.call_every(0.001, lambda: None)
        say("run_in_subinterp", _testcapi.run_in_subinterp("import pywheel"))
        for isolated in (False, True):
            e = run_in_new_interpreter(isolated, "import pywheel")  # left alive at exit
            say("refused", "ImportError" in e and "subinterpreter" in e)
        w = pywheel.Wheel()
        ev = threading.Event()
        w.call_later(0, ev.set)
        fired = main_wheel.stats()["fired"]
        say("main wheels work", ev.wait(5), wait_for(lambda: main_wheel.stats()["fired"] > fired))
        sys.exit(3)
        """
    )
    clean_exit(proc, 3)
    assert lines(proc) == [
        "run_in_subinterp -1",
        "refused True",
        "refused True",
        "main wheels work True True",
    ]
    assert "cannot be loaded in a subinterpreter" in proc.stderr  # run_in_subinterp's report


# ---------------------------------------------------------------------------
# processes started from callbacks


# The wheel thread blocks every signal while it waits (so that signals reach
# the main thread), but runs callbacks with the creator's mask: a process
# started from a callback (subprocess, os.fork) can be stopped with SIGTERM.
def test_subprocess_started_from_a_callback_can_be_terminated():
    import threading

    import pywheel

    box = {}
    ready = threading.Event()

    def spawn():
        box["proc"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        ready.set()

    with pywheel.Wheel() as w:
        w.call_later(0, spawn)
        assert ready.wait(10)
    proc = box["proc"]
    try:
        proc.terminate()
        proc.wait(1.5)
        assert proc.returncode == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_fork
def test_child_forked_from_a_callback_can_be_terminated():
    proc = run_forking(
        """
        import signal
        w = pywheel.Wheel()
        got = {}
        forked = threading.Event()

        def forker():
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            got["pid"] = pid
            forked.set()

        w.call_later(0, forker)
        assert forked.wait(5)
        os.kill(got["pid"], signal.SIGTERM)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            pid, status = os.waitpid(got["pid"], os.WNOHANG)
            if pid:
                say("child ended by", -os.waitstatus_to_exitcode(status))
                break
            time.sleep(0.02)
        else:
            os.kill(got["pid"], signal.SIGKILL)
            os.waitpid(got["pid"], 0)
            say("child ignored SIGTERM")
        """
    )
    clean_exit(proc)
    assert lines(proc) == [f"child ended by {int(signal.SIGTERM)}"]
