"""Runs CPython's whole test.test_asyncio (or the modules or tests named) and
writes each test's outcome to a JSON file: {"test id": "pass"|"fail"|"error"|"skip"}.

Which loop the suite runs on is decided by the environment, not here: the
parity harness puts tests/parity/site first on PYTHONPATH, and its
sitecustomize swaps in WheelEventLoop when PYWHEEL_PARITY_LOOP=wheel.

    python tests/parity/cpython_suite.py OUT.json [test.test_asyncio.test_tasks ...]
        [--memory GIB] [--module-timeout SECONDS] [--test-timeout SECONDS]

Each test module runs in a process of its own, with its address space capped
(RLIMIT_AS, --memory GiB, default 4) and wall-clock limits (--module-timeout,
default 900 s, for one process; --test-timeout, default 120 s, for one test:
the process is killed when its stream of outcomes has not moved for that
long), so that one test that grows or hangs without bound fails on this loop
instead of taking the run, or the machine, with it.  A test that
dies that way (MemoryError, the process killed by a signal or the timeout, or
exiting mid-test) is recorded as "fail"; the module's tests after it run in
a new process (at most MAX_RESUMES times a module; past that, the rest are
"fail" too, never dropped).  Each such event goes to OUT.json's twin
OUT.capped.json ({"module", "test", "reason", "maxrss_mib"} per event), and
each module's peak RSS to the log.

Why 4 GiB: a test module of this suite peaks at a few hundred MiB of RSS
(logged per module), and RLIMIT_AS counts address space, not RSS: glibc's
malloc arenas (64 MiB reserved each, up to 8 per core) and 8 MiB thread
stacks add about 1 GiB of reservations to a module that starts executor
threads.  4 GiB is several times what any module needs, and with the
harness's one test process at a time (each test's own subprocesses get the
same cap) it stays well inside a 24 GiB machine shared with other work,
where the unbounded test (test_runners' test_asyncio_run_without_uncancel on
uvloop) once grew to 23 GB before the kernel killed everything.
"""

from __future__ import annotations

import json
import os
import pkgutil
import resource
import signal
import subprocess
import sys
import time
import unittest

MAX_RESUMES = 5
PACKAGE = "test.test_asyncio"


# ---- the child: one module's tests, each outcome streamed as it happens ------


def child(stream_path: str, names: list[str]) -> int:
    stream = open(stream_path, "a", buffering=1)  # line-buffered: survives a kill

    def put(kind: str, tid: str) -> None:
        stream.write(f"{kind} {json.dumps(tid)}\n")

    class Result(unittest.TextTestResult):
        def startTest(self, test):
            put("start", test.id())
            super().startTest(test)

        def addSuccess(self, test):
            super().addSuccess(test)
            put("pass", test.id())

        def addFailure(self, test, err):
            super().addFailure(test, err)
            put("fail", test.id())

        def addError(self, test, err):
            super().addError(test, err)
            # setUpModule/tearDownClass errors arrive as _ErrorHolder objects.
            if err[0] is not None and issubclass(err[0], MemoryError):
                put("memory", test.id())
            put("error", test.id())

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            put("skip", test.id())

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            put("pass", test.id())

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            put("fail", test.id())

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                if issubclass(err[0], MemoryError):
                    put("memory", test.id())
                put("fail", test.id())

    try:
        suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    except unittest.SkipTest:  # test_windows_events and the like skip at import
        put("test", names[0])
        put("skip", names[0])
        put("done", "0")
        return 0

    def ids(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from ids(t)
            else:
                yield t.id()

    for tid in ids(suite):
        put("test", tid)
    result = unittest.TextTestRunner(verbosity=1, resultclass=Result).run(suite)
    put("done", str(result.testsRun))
    return 0


# ---- the parent: one child per module, capped, resumed past a runaway test ----


def modules() -> list[str]:
    import test.test_asyncio as pkg

    found = pkgutil.iter_modules(pkg.__path__)
    return sorted(f"{PACKAGE}.{m.name}" for m in found if m.name.startswith("test"))


def module_of(name: str) -> str:
    if "(" in name:  # "setUpModule (test.test_asyncio.test_x)" and the like
        name = name[name.index("(") + 1 : name.rindex(")")]
    return ".".join(name.split(".")[:3])


def read_stream(path: str):
    listed, started, outcomes, memory, done = [], [], {}, set(), False
    with open(path) as f:
        for line in f:
            kind, _, rest = line.rstrip("\n").partition(" ")
            try:
                tid = json.loads(rest)
            except ValueError:  # a line cut by the kill
                continue
            if kind == "test":
                listed.append(tid)
            elif kind == "start":
                started.append(tid)
            elif kind == "memory":
                memory.add(tid)
            elif kind == "done":
                done = True
            elif kind in ("fail", "error"):
                outcomes[tid] = kind
            elif kind in ("pass", "skip"):
                outcomes.setdefault(tid, kind)
    return listed, started, outcomes, memory, done


def run_child(names, stream, memory_bytes, timeout, test_timeout):
    """One child; returns (how it ended, its peak RSS in MiB)."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    cmd = [sys.executable, os.path.abspath(__file__), "--child", stream, *names]
    proc = subprocess.Popen(cmd, preexec_fn=cap, start_new_session=True)
    deadline = time.monotonic() + timeout
    ended = None
    while ended is None:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            ended = (status, usage)
        elif time.monotonic() > deadline or stalled(stream, test_timeout):
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            if time.monotonic() > deadline:
                return f"module timeout after {timeout:.0f}s", usage.ru_maxrss / 1024
            return f"test timeout: no outcome for {test_timeout:.0f}s", usage.ru_maxrss / 1024
        else:
            time.sleep(0.2)
    status, usage = ended
    proc.returncode = os.waitstatus_to_exitcode(status)
    try:  # what the module left running in its process group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    rc = proc.returncode
    how = "ok" if rc == 0 else (f"killed by signal {-rc}" if rc < 0 else f"exit {rc}")
    return how, usage.ru_maxrss / 1024


def stalled(stream: str, test_timeout: float) -> bool:
    """No line (a test started or ended) in the stream for test_timeout s."""
    try:
        return time.time() - os.stat(stream).st_mtime > test_timeout
    except FileNotFoundError:  # not started yet
        return False


def run_module(module, names, limits, scratch, outcomes, events):
    stream = os.path.join(scratch, module + ".stream")
    todo = names
    for attempt in range(MAX_RESUMES + 1):
        if os.path.exists(stream):
            os.remove(stream)
        t0 = time.monotonic()
        how, rss = run_child(todo, stream, *limits)
        listed, started, got, memory, done = read_stream(stream)
        outcomes.update(got)
        for tid in sorted(memory):
            events.append(
                {
                    "module": module,
                    "test": tid,
                    "reason": "MemoryError at the cap",
                    "maxrss_mib": round(rss),
                }
            )
        print(
            f"[cpython_suite] {module}: {how}, {len(got)} outcomes, peak RSS {rss:.0f} MiB, "
            f"{time.monotonic() - t0:.0f}s",
            flush=True,
        )
        if how == "ok" and done:
            return
        # The test that was running when the process ended is the culprit.
        culprit = next((t for t in reversed(started) if t not in got), None)
        reason = how if how != "ok" else "exited before the end"
        if culprit is not None:
            outcomes[culprit] = "fail"
            events.append(
                {"module": module, "test": culprit, "reason": reason, "maxrss_mib": round(rss)}
            )
        rest = [t for t in listed if t not in got and t != culprit and t not in started]
        if not listed:  # died before listing its tests: the module itself fails
            outcomes[module] = "fail"
            events.append(
                {
                    "module": module,
                    "test": module,
                    "reason": reason + " (at load)",
                    "maxrss_mib": round(rss),
                }
            )
            return
        if not rest:
            return
        if attempt == MAX_RESUMES:
            for t in rest:
                outcomes[t] = "fail"
            events.append(
                {
                    "module": module,
                    "test": f"{len(rest)} tests not run",
                    "reason": f"{MAX_RESUMES} resumes used up",
                    "maxrss_mib": round(rss),
                }
            )
            return
        todo = rest


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        return child(argv[1], argv[2:])
    memory_gib, timeout, test_timeout, rest = 4.0, 900.0, 120.0, []
    it = iter(argv)
    for a in it:
        if a == "--memory":
            memory_gib = float(next(it))
        elif a == "--module-timeout":
            timeout = float(next(it))
        elif a == "--test-timeout":
            test_timeout = float(next(it))
        else:
            rest.append(a)
    out, names = rest[0], rest[1:]
    capped_path = (out[: -len(".json")] if out.endswith(".json") else out) + ".capped.json"
    groups: dict[str, list[str]] = {}
    for name in names or modules():
        groups.setdefault(module_of(name), []).append(name)
    scratch = out + ".d"
    os.makedirs(scratch, exist_ok=True)
    outcomes: dict[str, str] = {}
    events: list[dict] = []
    t0 = time.monotonic()
    for module, group in groups.items():
        limits = (int(memory_gib * 2**30), timeout, test_timeout)
        run_module(module, group, limits, scratch, outcomes, events)
        # Written after every module: an interrupted run keeps what it got.
        with open(out, "w") as f:
            json.dump(outcomes, f, indent=0, sort_keys=True)
        with open(capped_path, "w") as f:
            json.dump(events, f, indent=0)
    kinds = ("pass", "fail", "error", "skip")
    counts = {k: sum(1 for o in outcomes.values() if o == k) for k in kinds}
    print(
        f"[cpython_suite] {len(groups)} modules, {len(outcomes)} tests in "
        f"{time.monotonic() - t0:.0f}s: {counts}; capped or killed: {len(events)}",
        flush=True,
    )
    for e in events:
        print(f"[cpython_suite] capped/killed: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
