"""Helpers shared by the test files: child interpreters (run_script, and run()
with its PRELUDE for the exit, close, fork and signal cases), polling, the
statistics identity, the deadline rule in exact arithmetic, and small callables
and exception handlers."""

import logging
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction

import pytest

import pywheel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The C sources beside tests/: in a checkout and in the sdist.  The tests that
# compile them (test_c.py, test_packaging.py's compiler checks, the cffi
# binding in wheel_cffi.py, test_source_layout.py) skip, saying why, in a copy
# of tests/ without them.
CSRC = os.path.join(ROOT, "csrc")
NO_CSRC = f"needs the C sources: {CSRC} is absent (they ship in the sdist, not in the wheel)"

# The folder holding the pywheel package this test run imported: the source
# tree for an editable install, site-packages for an installed wheel.  Child
# interpreters get it first on their path, and PYTHONSAFEPATH so that their
# working folder or script folder (this tree, say, with a pywheel/ that has no
# built extension) cannot put another copy in front: a child always imports
# the pywheel that the parent imported.
PYWHEEL_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(pywheel.__file__)))


def child_env(*extra_path: str) -> dict[str, str]:
    """os.environ for a child interpreter that must import this run's pywheel;
    extra_path entries (e.g. ROOT for the benchmarks) come after it."""
    env = dict(os.environ)
    path = [PYWHEEL_PARENT, *extra_path, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    env["PYTHONSAFEPATH"] = "1"
    return env


def run_script(code: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter that imports the same pywheel as this one."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
    )


# ---- threads of this process, native wheel threads included ------------------
# threading cannot see the wheels' native threads: the count comes from Linux's
# /proc/self/task, or macOS's proc_pidinfo(PROC_PIDTASKINFO) through ctypes
# (checked once against a thread started for it: a wrong layout is no
# source).  Elsewhere (Windows, a BSD without /proc) there is none, and the
# tests that count threads skip, saying why.  PYWHEEL_TESTS_NO_PROC=1 makes
# the suite act as where /proc is absent (tests/test_no_proc.py runs it so).
# The code is text, so that PRELUDE's child scripts count the same way.

#: Set to simulate a system without /proc (tests only; pywheel.testing has
#: its own switch, PYWHEEL_TESTING_NO_PROC).
NO_PROC_ENV = "PYWHEEL_TESTS_NO_PROC"
_ACTS_WITHOUT_PROC = os.environ.get(NO_PROC_ENV, "") not in ("", "0")

THREAD_COUNT_CODE = """
def _thread_counter():
    # A function returning this process's thread count, or None.
    import os, sys, threading
    if os.environ.get("PYWHEEL_TESTS_NO_PROC", "") not in ("", "0"):
        return None
    if os.path.isdir("/proc/self/task"):
        return lambda: len(os.listdir("/proc/self/task"))
    if sys.platform != "darwin":
        return None
    import ctypes, ctypes.util
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("proc") or "/usr/lib/libproc.dylib")
        pidinfo = lib.proc_pidinfo
    except (OSError, AttributeError):
        return None
    pidinfo.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int]
    pidinfo.restype = ctypes.c_int
    # struct proc_taskinfo: six uint64_t, then twelve int32_t, pti_threadnum
    # the tenth of them: int32 slot 12 + 9.  PROC_PIDTASKINFO is 4.
    info = (ctypes.c_int32 * 24)()

    def count():
        if pidinfo(os.getpid(), 4, 0, info, ctypes.sizeof(info)) != ctypes.sizeof(info):
            raise OSError("proc_pidinfo(PROC_PIDTASKINFO) failed")
        return info[21]

    return _probed(count)


def _probed(count):
    # count, if it counts at least Python's threads and one more while a
    # thread is started for it (a wrong struct layout reads something else);
    # else None.
    import threading
    for _ in range(3):  # another thread may come or go meanwhile: try again
        go = threading.Event()
        t = threading.Thread(target=go.wait)
        try:
            before = count()
            t.start()
            during = count()
        except OSError:
            return None
        finally:
            go.set()
            if t.ident is not None:
                t.join()
        if before >= threading.active_count() and during == before + 1:
            return count
    return None


_THREAD_COUNTER = _thread_counter()


def thread_count():
    # Threads of this process, native wheel threads included.
    if _THREAD_COUNTER is None:
        raise RuntimeError("no thread count here")
    return _THREAD_COUNTER()
"""

_counting: dict = {}
exec(THREAD_COUNT_CODE, _counting)

#: Why threads cannot be counted here, or None.
NO_THREAD_COUNT = (
    None
    if _counting["_THREAD_COUNTER"] is not None
    else f"counts native threads: no source on {sys.platform} "
    f"(/proc/self/task on Linux, proc_pidinfo on macOS)"
    + (f"; {NO_PROC_ENV} is set" if _ACTS_WITHOUT_PROC else "")
)

#: Marks a test that counts threads in a child (PRELUDE's thread_count).
needs_thread_count = pytest.mark.skipif(NO_THREAD_COUNT is not None, reason=NO_THREAD_COUNT or "")

#: Whether /proc/self/task/<tid>/status can be read for a thread's own
#: figures (Linux), unless PYWHEEL_TESTS_NO_PROC says to act as without.
PROC_TASKS = not _ACTS_WITHOUT_PROC and os.path.isdir("/proc/self/task")


def thread_count() -> int:
    """Threads of this process, native wheel threads included; skips the
    test, saying why, where they cannot be counted."""
    if NO_THREAD_COUNT is not None:
        pytest.skip(NO_THREAD_COUNT)
    return _counting["thread_count"]()


def threads_now() -> int | None:
    """Threads of this process now, native ones included, or None where they
    cannot be counted: a test whose point is something else (a leak, a
    refusal) then checks that, not the count (see threads_back)."""
    return None if NO_THREAD_COUNT is not None else _counting["thread_count"]()


def threads_back(base: int | None, timeout: float = 10.0) -> bool:
    """Whether the thread count falls back to ``base`` (from threads_now())
    or below within ``timeout``; True where threads are not counted."""
    if base is None:
        return True
    return wait_for(lambda: _counting["thread_count"]() <= base, timeout=timeout)


def needs_linux_path():
    """A mark for a test that proves sockets inside the loop through
    pywheel.testing's Linux path (/proc, sock_diag, TCP_INFO): skipped where
    that is off, where every socket counts as outside (what
    tests/test_no_proc.py checks)."""
    from pywheel.testing import _peers

    why = _peers.without_linux_path()
    return pytest.mark.skipif(
        why is not None, reason=f"needs pywheel.testing's Linux path (/proc): {why}"
    )


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.002) -> bool:
    """Polls predicate until it holds or timeout seconds pass; its last answer."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return predicate()
        time.sleep(interval)
    return True


def is_fast(method) -> bool:
    """Whether a loop's call_later/call_at is the C path (csrc/binding/loop.c)."""
    return isinstance(getattr(method, "__self__", None), pywheel._core._LoopTimers)


def outcome_of(*, when: bool, message=str):
    """An outcome(fn, *args, **kw) for the oracle tests that put two call_later
    or call_at paths side by side: what fn(*args, **kw) did, as ("ok",
    handle.when()) (("ok",) where when is false: two call_later paths read the
    clock apart) or (exception type, message(str(error))); a handle made is
    cancelled."""

    def outcome(fn, /, *args, **kw):
        try:
            h = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - the oracle compares any failure
            return type(e), message(str(e))
        result = ("ok", h.when()) if when else ("ok",)
        h.cancel()
        return result

    return outcome


def fails_under(program, timing, runs=None) -> bool:
    """Whether ``program()`` (a coroutine function) fails an assertion when run
    on virtual time under ``timing``: the predicate Timing.minimize() is given
    in the minimize tests; ``runs``, if given, collects each Timing tried."""
    from pywheel import testing as vt

    if runs is not None:
        runs.append(timing)
    try:
        vt.run(program(), timing=timing)
    except AssertionError:
        return True
    return False


def conserved(w) -> bool:
    s = w.stats()
    return s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]


TICK_NS = 1_000_000  # the fixtures' tick


def ceil_tick_ns(when_ns: int, tick_ns: int = TICK_NS) -> int:
    return -(-when_ns // tick_ns) * tick_ns


def settle(w, predicate) -> None:
    """Lets every timer due within the next second run (ManualWheel: advance)."""
    if isinstance(w, pywheel.ManualWheel):
        w.advance(1.0)
    assert wait_for(predicate, timeout=5.0)


class Callback:
    def __call__(self, *args):
        pass


def raiser(arg):
    raise ValueError(arg)


class IndexOnly:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value

    def __repr__(self):
        return f"IndexOnly({self.value!r})"


class Recorder:
    """An exception handler that keeps the contexts it was given (thread-safe)."""

    def __init__(self):
        self.contexts = []
        self.lock = threading.Lock()

    def __call__(self, wheel, context):
        with self.lock:
            self.contexts.append(context)

    def types(self):
        return [type(c.get("exception")) for c in self.contexts]


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


# ---- child interpreters for the crash-prone cases (exit, close, fork, signals)

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

# Shared by every script: helpers to print at once, to wait for something,
# and to keep a wheel's thread inside a slow callback (the exit and close cases).
PRELUDE = (
    """
import os, sys, time, threading, gc
import pywheel

def say(*args):
    print(*args, flush=True)

def slow_callback(w, seconds, done=None, busy=False):
    # Schedules on w, due at once, a callback that sleeps (busy: spins in
    # Python, holding the GIL between switches) for seconds, then calls done()
    # or says "slow done".  Returns an Event the callback sets when it starts.
    started = threading.Event()

    def slow():
        started.set()
        end = time.monotonic() + seconds
        if busy:
            while time.monotonic() < end:
                pass
        else:
            time.sleep(seconds)
        if done is None:
            say("slow done")
        else:
            done()

    w.call_later(0, slow)
    return started

def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return predicate()
        time.sleep(0.005)
    return True

"""
    + THREAD_COUNT_CODE
)


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


def run_pytest(tmp_path, files, *args, pythonpath=None, timeout=120):
    """Writes files (name -> text, dedented) into tmp_path and runs pytest
    there in a child, without the parent run's PYTEST_ variables.  looptime
    (a benchmark peer, if installed) patches pytest-asyncio's loops and fails
    without pytest-asyncio: it is kept out."""
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += ["-p", "no:looptime_plugin", *args]
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_shell(cwd, line: str, pythonpath=None, timeout=120):
    """Runs a command line as a user would paste it (through the shell), in
    cwd, with run_pytest's environment: the replay lines pytest prints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(
        line, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def first_ns_reading_at_least(x: float) -> int:
    """The least count of nanoseconds n whose reading, n / 10**9 correctly
    rounded (as the wheel's time() and when() read), is at least the float
    x: what the wheel makes of a deadline x.  Exact (Fractions), for tests to
    check the C rule against."""
    n = math.ceil(Fraction(x) * 10**9)
    while (n - 1) / 10**9 >= x:
        n -= 1
    while n / 10**9 < x:
        n += 1
    return n
