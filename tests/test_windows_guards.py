"""The Python side where POSIX pieces are missing (Windows): no ``os.fork``
or ``os.register_at_fork``, ``time.clock_gettime``, ``fcntl``, ``os.waitid``,
``os.getloadavg`` or ``os.sched_getaffinity``.  No Windows CPython can be had
here, so a child interpreter takes them away before importing pywheel, then
uses a Wheel, the demo's machine figures, a virtual loop whose clocks move by
a real ``time.sleep``, and a socket on virtual time (outside, without the
Linux path: waited for, not jumped over)."""

from helpers import run_script

WITHOUT_POSIX = """
import os, sys, time
del os.register_at_fork, os.fork  # (the stdlib's random checks os.fork)
del time.clock_gettime
del os.waitid
del os.getloadavg
del os.sched_getaffinity
sys.modules["fcntl"] = None  # import fcntl: ImportError
real_perf_counter = time.perf_counter

import asyncio, socket, threading
import pywheel
import pywheel.testing
from pywheel.testing import VirtualEventLoop, _clocks, _peers

# A Wheel fires.
fired = threading.Event()
with pywheel.Wheel() as w:
    w.call_later(0.01, fired.set)
    assert fired.wait(10)
print("wheel ok")

# The demo's figures of the machine (python -m pywheel).
import pywheel.__main__ as demo
assert demo.load() == "unknown"
assert demo.cpus().endswith(" CPUs")

# time.sleep on the loop's thread moves its clocks by the real time slept,
# measured by the fallback clock.
assert _clocks._elapsed is real_perf_counter, _clocks._elapsed

async def slept():
    t0 = time.monotonic()
    time.sleep(0.05)
    return time.monotonic() - t0

loop = VirtualEventLoop(clocks=True)
try:
    assert loop.run_until_complete(slept()) >= 0.05
finally:
    loop.close()
print("clocks ok")

# Sockets: no Linux path (no fcntl), every one outside: a byte a thread sends
# 0.3 real seconds later beats a 30 s virtual timeout.
assert not _peers._PROC
if sys.platform.startswith("linux"):
    assert _peers.without_linux_path() == "no fcntl module"

async def receive():
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    t = threading.Timer(0.3, b.send, [b"x"])
    t.start()
    try:
        return await asyncio.wait_for(loop.sock_recv(a, 1), 30)
    finally:
        t.join()
        a.close()
        b.close()

loop = VirtualEventLoop(autojump_threshold=5.0)
try:
    assert loop.run_until_complete(receive()) == b"x"
    assert loop.time() < 30 and loop._threshold_waits >= 1
finally:
    loop.close()
print("sockets ok")
"""


def test_pywheel_without_posix_pieces():
    proc = run_script(WITHOUT_POSIX, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == ["wheel ok", "clocks ok", "sockets ok", ""]
    # The one note, on the logger (no handler configured: Python's last
    # resort prints it to stderr), and nothing else.
    notes = [line for line in proc.stderr.splitlines() if line]
    assert len(notes) == 1 and "counts as outside" in notes[0], proc.stderr
