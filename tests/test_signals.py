"""Signals (docs/explanation/guarantees.md: "Signals"; "Process lifecycle"):
the wheel thread blocks every signal while it waits, so SIGINT reaches the
main thread while timers run and Ctrl-C interrupts a close() that waits;
callbacks run with the signal mask of the thread that created the wheel, so
processes they start (subprocess, fork) can be terminated.  Each case in its
own interpreter with a timeout."""

import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, child_env, clean_exit, lines, needs_fork, run, run_forking

# ---- Ctrl-C while the main thread blocks in close() -------------------------

SIGINT_CHILD = """
import os, signal, sys, time, threading, pywheel
# Ctrl-C as a user's process has it, even when this test run was started
# with SIGINT ignored (a background job), which children inherit
signal.signal(signal.SIGINT, signal.default_int_handler)
w = pywheel.Wheel()
started = threading.Event()
def slow():
    started.set()
    time.sleep(5)
w.call_later(0, slow)
pending = w.call_later(60, print, "never")
assert started.wait(5)
print("closing", flush=True)
t0 = time.monotonic()
try:
    {call}
except KeyboardInterrupt:
    t1 = time.monotonic()
    assert w.closed and pending.cancelled()
    assert w.close(timeout=0) == []
    print("interrupted", t1, t1 - t0, flush=True)
    os._exit(0)
print("not interrupted", time.monotonic() - t0, flush=True)
os._exit(1)
"""


@pytest.mark.parametrize(
    "call", ["w.close()", "w.close(timeout=30)", "w.__exit__(None, None, None)"]
)
def test_ctrl_c_while_blocked_in_close_is_delivered_promptly(call):
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGINT_CHILD.format(call=call)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout.readline().strip() == "closing"
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err)
    word, at, waited = out.split()
    assert word == "interrupted"
    assert float(at) - sent < 2.0, "Ctrl-C was not delivered promptly"
    assert float(waited) < 3.0


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
