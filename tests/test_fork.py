"""Fork (docs/explanation/guarantees.md: "Fork";
"Process lifecycle"): in a forked child every Wheel inherited from the parent
is closed and new wheels work, at any moment of the parent: idle,
mid-callback, from a callback, while another thread advances a ManualWheel,
nested forks, and multiprocessing with the fork start method.  Each case in
its own interpreter with a timeout."""

import textwrap

import pytest
from helpers import clean_exit, lines, needs_fork, run_forking

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
    # docs/explanation/guarantees.md, "Fork": a ManualWheel keeps working in
    # the child.  Forked while another thread is inside advance() (its
    # callback sleeping): in the child that thread is gone; the timers of its
    # unfinished batch are still pending and a new advance() runs them, once.
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
