"""Where /proc is missing (macOS, Windows, the BSDs, a container without it).

pywheel.testing proves a socket inside the loop through Linux's /proc
(``_peers``); without it every descriptor a virtual loop watches counts as
outside: the loop waits ``autojump_threshold`` for it, never jumps early, and
says so once.  ``PYWHEEL_TESTING_NO_PROC=1`` switches that path off on Linux,
and ``PYWHEEL_TESTS_NO_PROC=1`` makes this suite's helpers act as without
/proc (the tests that count native threads, or read a thread's context
switches, skip saying why).  Here: the switch, the safe side with it off (a
thread's or a child's write is waited for, not jumped over), the note said
once, and the virtual-time tests that matter run in a child pytest with both
switches on and every read of /proc refused by an audit hook."""

import asyncio
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading

import pytest
from helpers import NO_PROC_ENV, THREAD_COUNT_CODE, child_env, run_pytest

from pywheel.testing import VirtualEventLoop, _peers

HERE = os.path.dirname(os.path.abspath(__file__))
LINUX_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fdinfo")


@pytest.mark.parametrize(
    "value, off", [("1", True), ("yes", True), ("0", False), ("", False), (None, False)]
)
def test_the_switch(monkeypatch, value, off):
    if value is None:
        monkeypatch.delenv(_peers.NO_PROC_ENV, raising=False)
    else:
        monkeypatch.setenv(_peers.NO_PROC_ENV, value)
    assert _peers._linux_path() is (LINUX_PROC and not off)


def test_the_switch_is_read_at_import():
    code = "from pywheel.testing import _peers; print(_peers._PROC, _peers.without_linux_path())"
    env = child_env()
    env[_peers.NO_PROC_ENV] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(maxsplit=1) == ["False", f"switched off by {_peers.NO_PROC_ENV}\n"]
    assert out.stderr == ""


def test_a_thread_count_source_is_checked_before_use():
    # macOS's count comes through a C struct read with ctypes: a wrong
    # layout must give no source (the tests skip), not a wrong count.
    ns: dict = {}
    exec(THREAD_COUNT_CODE, ns)
    probed = ns["_probed"]
    assert probed(lambda: 7) is None
    assert probed(lambda: 10**6) is None
    counts = iter(range(1000, 0, -1))
    assert probed(lambda: next(counts)) is None

    def failing():
        raise OSError("proc_pidinfo failed")

    assert probed(failing) is None
    if os.path.isdir("/proc/self/task"):
        real = lambda: len(os.listdir("/proc/self/task"))  # noqa: E731
        assert probed(real) is real


@pytest.fixture
def no_linux_path(monkeypatch):
    monkeypatch.setattr(_peers, "_PROC", False)
    monkeypatch.setattr(_peers, "_said", False)
    monkeypatch.setenv(_peers.NO_PROC_ENV, "1")


def test_every_socket_is_outside_and_that_is_said_once(monkeypatch, caplog):
    a, b = socket.socketpair()
    try:
        if _peers._PROC:  # the Linux path proves this pair inside
            assert not _peers.Peers().any_outside([a.fileno(), b.fileno()])
        monkeypatch.setattr(_peers, "_PROC", False)
        monkeypatch.setattr(_peers, "_said", False)
        monkeypatch.setenv(_peers.NO_PROC_ENV, "1")
        caplog.set_level(logging.WARNING, logger="pywheel.testing")
        peers = _peers.Peers()
        assert not peers.any_outside([])  # nothing watched: nothing said
        assert caplog.records == []
        for _ in range(3):
            assert peers.any_outside([a.fileno(), b.fileno()])
            assert _peers.Peers().any_outside({a.fileno(): 1})
        notes = [r for r in caplog.records if r.name == "pywheel.testing"]
        assert len(notes) == 1
        assert notes[0].levelno == logging.WARNING
        message = notes[0].getMessage()
        assert f"switched off by {_peers.NO_PROC_ENV}" in message
        assert "counts as outside" in message
    finally:
        a.close()
        b.close()


def _late_write(how, b):
    """Writes b"x" to socket ``b`` 0.3 real seconds from now: from a thread
    of this process, or from a child that holds a copy of ``b``."""
    if how == "thread":
        timer = threading.Timer(0.3, b.send, [b"x"])
        timer.start()
        return timer.join
    code = (
        "import socket, sys, time; time.sleep(0.3); "
        "socket.socket(fileno=int(sys.argv[1])).send(b'x')"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(b.fileno())], pass_fds=[b.fileno()])
    return lambda: child.wait(30)


@pytest.mark.parametrize(
    "how",
    [
        "thread",
        pytest.param("child", marks=pytest.mark.skipif(os.name == "nt", reason="pass_fds: POSIX")),
    ],
)
def test_without_the_linux_path_the_loop_waits_for_what_it_cannot_see(no_linux_path, how):
    # The pair's other end is non-blocking and registered nowhere: the Linux
    # path takes it for this loop's own idle socket (it cannot see a thread
    # write to it: see _peers, "Not seen").  Without the Linux path nothing is
    # proven: the loop waits (counted) and the byte beats the 30 s timeout.
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        done = _late_write(how, b)
        try:
            return await asyncio.wait_for(loop.sock_recv(a, 1), 30)
        except TimeoutError:
            return "timeout"
        finally:
            done()
            a.close()
            b.close()

    loop = VirtualEventLoop(autojump_threshold=5.0)
    try:
        assert loop.run_until_complete(main()) == b"x"
        assert loop.time() < 30 and loop._threshold_waits >= 1
    finally:
        loop.close()


def test_without_the_linux_path_the_clock_still_jumps_when_nothing_is_watched(no_linux_path):
    async def main():
        await asyncio.sleep(3600)

    loop = VirtualEventLoop(autojump_threshold=5.0)
    try:
        loop.run_until_complete(main())
        assert loop.time() >= 3600 and loop._threshold_waits == 0
    finally:
        loop.close()


SOCKET_TEST = """
import asyncio, socket

def test_a_socket_waits(caplog):
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_recv(a, 1), 0.01)
        except TimeoutError:
            pass
        a.close()
        b.close()

    asyncio.run(main())
    # Not said again here: the header said it (or, on Linux, nothing is).
    assert [r for r in caplog.records if r.name == "pywheel.testing"] == []
"""


@pytest.mark.parametrize("off", [True, False])
def test_pytest_virtual_time_says_it_in_its_header(tmp_path, monkeypatch, off):
    if off:
        monkeypatch.setenv(_peers.NO_PROC_ENV, "1")
    else:
        monkeypatch.delenv(_peers.NO_PROC_ENV, raising=False)
    args = ("--virtual-time", "-p", "no:asyncio", "-v")
    proc = run_pytest(tmp_path, {"test_s.py": SOCKET_TEST}, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [line for line in proc.stdout.splitlines() if "counts as outside" in line]
    if off or not LINUX_PROC:
        # Once, in the header (not again in the test's captured log).
        assert len(said) == 1, proc.stdout
        assert said[0].startswith("pywheel.testing: ")
    else:
        assert said == [], proc.stdout
    assert proc.stderr == ""


# Refuses every read of /proc in the child run (open, listdir, scandir: the
# audit events that name a path), and counts the refusals: a test that
# escapes the gates fails with FileNotFoundError, as where /proc is absent.
NO_PROC_PLUGIN = textwrap.dedent(
    """
    import sys

    refused = []

    def _hook(event, args):
        if event in ("open", "os.listdir", "os.scandir") and args:
            path = args[0]
            if isinstance(path, bytes):
                path = path.decode(errors="replace")
            if isinstance(path, str) and (path == "/proc" or path.startswith("/proc/")):
                refused.append(path)
                raise FileNotFoundError(2, "No such file or directory (no /proc here)", path)

    sys.addaudithook(_hook)

    def pytest_terminal_summary(terminalreporter):
        terminalreporter.write_line(f"no-proc: {len(refused)} reads of /proc refused")
    """
)

#: The virtual-time tests that matter without the Linux path: sockets waited
#: for (those proving one inside skip), loops on threads and thread jobs, the
#: loop's own tests; and the tests that count native threads (which skip).
NO_PROC_RUN = [
    "test_virtual_peers_outside.py",
    "test_virtual_inprocess_sockets.py",
    "test_virtual_sockets_in_flight.py",
    "test_virtual_sockets_classification.py",
    "test_virtual_loop_on_a_thread.py",
    "test_virtual_threads.py",
    "test_virtual_time_aiohttp_keepalive.py",
    "test_testing_loop.py",
    "test_lifecycle.py",
    "test_close.py::test_close_from_a_callback_that_drops_the_last_reference",
    "test_threads.py::test_many_wheels_created_and_dropped_from_many_threads",
]


@pytest.mark.skipif(not hasattr(sys, "addaudithook"), reason="needs sys.addaudithook")
def test_the_virtual_time_tests_pass_without_proc(tmp_path):
    (tmp_path / "no_proc_plugin.py").write_text(NO_PROC_PLUGIN)
    env = {k: v for k, v in child_env(str(tmp_path)).items() if not k.startswith("PYTEST_")}
    env[_peers.NO_PROC_ENV] = "1"
    env[NO_PROC_ENV] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no_proc_plugin"]
    cmd += ["-p", "no:looptime_plugin", "-rs", "-o", "addopts=", "-m", "not slow"]
    cmd += [os.path.join(HERE, name) for name in NO_PROC_RUN]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-6000:] + proc.stderr[-3000:]
    assert "no-proc: 0 reads of /proc refused" in out
    passed = int(re.search(r"(\d+) passed", out).group(1))
    assert passed >= 60, out[-3000:]
    # What skipped, skipped for its reason: the tests that prove a socket
    # inside, and those that count native threads.
    assert f"Linux path (/proc): switched off by {_peers.NO_PROC_ENV}" in out
    assert f"counts native threads: no source on {sys.platform}" in out
    assert f"{NO_PROC_ENV} is set" in out
