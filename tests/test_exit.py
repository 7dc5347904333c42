"""Interpreter exit (docs/explanation/guarantees.md, "Interpreter exit";
"Process lifecycle"): an atexit hook closes every
wheel before the interpreter finalizes, whatever is pending or running at
the time: timers due during shutdown, sys.exit() and unhandled exceptions in
the main thread, a callback still running (within pywheel.EXIT_GRACE, or past
it), daemon threads hammering a wheel, wheels in reference cycles.  Each case
in its own interpreter with a timeout: each can hang or crash a process."""

import time

import pytest
from helpers import clean_exit, lines, run, run_script

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

        def hook():
            say("hook start", w.closed)
            ran = threading.Event()
            w.call_later(0.05, lambda: (say("due during the user's atexit hook"), ran.set()))
            assert ran.wait(5)
            started = slow_callback(w, 0.5)
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
        started = slow_callback(w, 0.3)
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
        w.call_every(0.001, lambda: None)
        started = slow_callback(w, 0.2)
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


def test_system_exit_in_a_callback_does_not_end_the_process():
    # docs/explanation/guarantees.md, "Errors": on a threaded wheel SystemExit and KeyboardInterrupt
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
        started = slow_callback(w, 0.3)
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
# atexit hooks that run after pywheel's own (registered before `import
# pywheel`, as a library imported first registers them): the loops' wheels
# have no thread, so they keep working there as the stock loop does.

# Each loop a late hook may run, and the loop it must behave as.
LATE_LOOPS = {
    "asyncio": "asyncio.new_event_loop",
    "uvloop": "__import__('uvloop').new_event_loop",
    "pywheel.asyncio": "__import__('pywheel.asyncio').asyncio.new_event_loop",
    "pywheel.uvloop": "__import__('pywheel.uvloop').uvloop.new_event_loop",
    "pywheel.testing": "__import__('pywheel.testing').testing.VirtualEventLoop",
}
ORACLE = {"pywheel.asyncio": "asyncio", "pywheel.testing": "asyncio", "pywheel.uvloop": "uvloop"}


def late_hook_program(loop: str, helpers: str = "asyncio") -> str:
    # One loop made in the main program and run again in the late hook, and
    # one made in the hook; sleeps, call_later, call_at, a timeout, a timer
    # left pending then cancelled.  Deadlines made at one moment, so their
    # order is the same on a busy machine and on virtual time.
    return f"""
        import asyncio, atexit, sys

        async def program(tag):
            sleep, timeout = helpers.sleep, helpers.timeout
            loop = asyncio.get_running_loop()
            out = [tag]
            loop.call_later(0.02, out.append, "call_later")
            loop.call_at(loop.time() + 0.01, out.append, "call_at")
            never = loop.call_later(3600, out.append, "never")
            await sleep(0.03)
            out.append("slept")
            try:
                async with timeout(0.01):
                    await sleep(3600)
            except TimeoutError:
                out.append("timed out")
            never.cancel()
            return out

        def late():
            print(*runner.run(program("made before exit")), flush=True)
            runner.close()
            with asyncio.Runner(loop_factory=factory) as r:
                print(*r.run(program("made in the hook")), flush=True)

        atexit.register(late)  # before pywheel: runs after pywheel's own hook
        import pywheel

        w = pywheel.Wheel()  # a threaded wheel running at exit, as in a real program
        w.call_every(0.001, lambda: None)
        factory = {LATE_LOOPS[loop]}
        import {helpers} as helpers
        runner = asyncio.Runner(loop_factory=factory)
        print(*runner.run(program("main")), flush=True)
        """


@pytest.mark.parametrize("loop", ["pywheel.asyncio", "pywheel.testing", "pywheel.uvloop"])
def test_loops_run_in_atexit_hooks_registered_before_pywheel(loop):
    oracle = ORACLE[loop]
    if oracle == "uvloop":
        pytest.importorskip("uvloop", reason="pywheel.uvloop's oracle is uvloop")
    mine, theirs = run_script(late_hook_program(loop)), run_script(late_hook_program(oracle))
    assert theirs.returncode == 0 and theirs.stderr == "", theirs.stderr
    assert lines(theirs)[1:] == [
        "made before exit call_at call_later slept timed out",
        "made in the hook call_at call_later slept timed out",
    ]
    assert (mine.returncode, mine.stdout, mine.stderr) == (0, theirs.stdout, "")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_wheel_helpers_run_in_atexit_hooks_registered_before_pywheel(loop):
    # pywheel.asyncio's sleep and timeout on a loop without a wheel use a
    # shared threaded wheel, which the late hook may not make: they use the
    # loop's own timers then, as asyncio's sleep and timeout do.
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    mine = run_script(late_hook_program(loop, "pywheel.asyncio"))
    theirs = run_script(late_hook_program(loop))
    assert theirs.returncode == 0 and theirs.stderr == "", theirs.stderr
    assert (mine.returncode, mine.stdout, mine.stderr) == (0, theirs.stdout, "")


def test_late_atexit_hook_finds_threaded_wheels_stopped_and_manual_ones_working():
    # Threaded wheels are stopped by pywheel's hook whatever runs after it
    # (a made one is closed, a new one refused: nobody would stop its thread
    # before finalization); a ManualWheel made before exit keeps its timers.
    proc = run_script(
        """
        import atexit

        def late():
            say("threaded closed:", w.closed)
            try:
                w.call_later(0, say, "never")
            except RuntimeError as e:
                say("threaded:", e)
            try:
                pywheel.Wheel()
            except RuntimeError as e:
                say("new threaded:", e)
            say("manual closed:", m.closed, len(m))
            say("manual ran:", m.advance(2), ran)

        def say(*args):
            print(*args, flush=True)

        atexit.register(late)
        import pywheel

        w = pywheel.Wheel()
        w.call_every(0.001, lambda: None)
        m = pywheel.ManualWheel()
        ran = []
        m.call_later(1, ran.append, "manual timer")
        """
    )
    clean_exit(proc)
    out = lines(proc)
    assert out[:3] == [
        "threaded closed: True",
        "threaded: the wheel is closed: the interpreter is exiting",
        "new threaded: the interpreter is exiting: no new Wheel threads",
    ]
    assert out[3:] == ["manual closed: False 1", "manual ran: 1 ['manual timer']"]
    assert proc.stderr == ""
