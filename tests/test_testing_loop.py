"""pywheel.testing.VirtualEventLoop: virtual time, determinism, stock order,
real I/O, deadlock and limit errors, bad input."""

import asyncio
import functools
import heapq
import itertools
import math
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from pywheel import testing as vt
from pywheel.asyncio import WheelEventLoop

# ---- a reference: stock asyncio's own loop on the same virtual clock ---------


class _StockJumpSelector:
    def __init__(self, sel, loop):
        self._sel, self._loop = sel, loop

    def __getattr__(self, name):
        return getattr(self._sel, name)

    def select(self, timeout=None):
        events = self._sel.select(0)
        if events or (timeout is not None and timeout <= 0):
            return events
        if not self._loop._scheduled:
            raise RuntimeError("reference loop: deadlock")
        self._loop.now = max(self._loop.now, self._loop._scheduled[0]._when)
        return []


class _FifoTimerHandle(asyncio.TimerHandle):
    """asyncio's heap leaves equal deadlines in no particular order; pywheel
    (DESIGN.md) runs them in the order they were scheduled."""

    __slots__ = ("_seq",)

    def __lt__(self, other):
        return (self._when, self._seq) < (other._when, other._seq)


class StockVirtualLoop(asyncio.SelectorEventLoop):
    """BaseEventLoop._run_once itself, with time() jumping to the heap's head:
    the order and timestamps every virtual loop must reproduce."""

    def __init__(self):
        self.now = 0.0
        self._seq = itertools.count()
        super().__init__()
        self._selector = _StockJumpSelector(self._selector, self)
        self._clock_resolution = 1e-9

    def time(self):
        return self.now

    def call_at(self, when, callback, *args, context=None):
        timer = _FifoTimerHandle(when, callback, args, self, context)
        timer._seq = next(self._seq)
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer


def run_stock(main):
    with asyncio.Runner(loop_factory=StockVirtualLoop) as r:
        return r.run(main)


def mixed_program(trace):
    """Timers, call_soon chains, tasks, timeouts and cancellations, with ties."""

    async def main():
        loop = asyncio.get_running_loop()

        def mark(name):
            trace.append((round(loop.time(), 9), name))

        async def sleeper(name, delays):
            for d in delays:
                await asyncio.sleep(d)
                mark(name)

        async def slow_reply():
            await asyncio.sleep(0.3)
            return "reply"

        def chain(n):
            mark(f"soon{n}")
            if n:
                loop.call_soon(chain, n - 1)

        loop.call_later(0.2, chain, 3)
        loop.call_later(0.2, mark, "timer0.2")
        loop.call_at(loop.time() + 0.1, mark, "at0.1")
        h = loop.call_later(0.15, mark, "cancelled")
        loop.call_later(0.05, h.cancel)
        tasks = [
            asyncio.create_task(sleeper("a", [0.1, 0.1, 0.25])),
            asyncio.create_task(sleeper("b", [0.2, 0.05, 0.0, 0.2])),
            asyncio.create_task(sleeper("c", [0.0, 0.0, 0.45])),
        ]
        try:
            await asyncio.wait_for(slow_reply(), 0.25)
        except TimeoutError:
            mark("timeout")
        async with asyncio.timeout(1.0):
            mark(await slow_reply())
        await asyncio.gather(*tasks)
        mark("end")
        return loop.time()

    return main()


def test_jumps_to_each_deadline_without_real_waiting():
    trace = []
    t0 = time.monotonic()

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3600)
        trace.append(loop.time())
        await asyncio.sleep(86400 * 365)
        trace.append(loop.time())

    vt.run(main(), start=5.0, quantum=0)  # exact readings: each jump lands on the deadline
    assert trace == [3605.0, 5.0 + 3600 + 86400 * 365]
    trace.clear()
    vt.run(main(), start=5.0)
    # the default quantum (10 µs per iteration that does not jump): the
    # first step runs at 5.00001, each sleep's timer is due its delay later
    # and the step it wakes runs one iteration after the jump
    assert trace == [3605.00002, 31539605.00003]
    assert time.monotonic() - t0 < 5  # generous: no real sleeping


def test_same_order_and_timestamps_as_stock_asyncio():
    # StockVirtualLoop (asyncio's own _run_once, a clock that only jumps) has
    # exact readings: so does quantum=0, which this checks
    ours, stock = [], []
    end = vt.run(mixed_program(ours), quantum=0)
    assert run_stock(mixed_program(stock)) == end
    assert ours == stock


def test_deterministic_across_runs():
    traces = []
    for _ in range(3):
        t = []
        vt.run(mixed_program(t))
        traces.append(t)
    assert traces[0] == traces[1] == traces[2]
    assert len(traces[0]) > 15


def _spin_chain(second: float, **kwargs) -> list:
    """The clock as a chain of 51 callbacks reads it, from a timer at t=1,
    with a second timer due at ``second`` while the chain runs."""
    seen = []

    async def main():
        loop = asyncio.get_running_loop()

        def spin(n):
            seen.append(loop.time())
            if n:
                loop.call_soon(spin, n - 1)

        loop.call_later(1.0, spin, 50)
        loop.call_later(second, spin, 0)  # due while the chain runs: waits for it
        await asyncio.sleep(2)

    vt.run(main(), **kwargs)
    return seen


def test_time_moves_one_quantum_per_iteration_and_never_backwards():
    seen = _spin_chain(1.0002)
    # the timers are set in main's first step, one iteration (10 µs) in; the
    # chain's first call is the jump's, exactly at 1.00001, then one quantum
    # per iteration; the second timer falls due during the chain and runs
    # after the callback that was ready before it
    chain = [round(1.00001 + k * 1e-5, 9) for k in range(51)]
    assert seen[:21] == chain[:21]
    assert seen[21] == chain[20] and seen[22:] == chain[21:]


def test_with_quantum_zero_time_never_moves_while_callbacks_are_ready():
    seen = _spin_chain(1.0005, quantum=0)
    assert seen[:51] == [1.0] * 51
    assert seen[51:] == [1.0005]


def test_start_and_tick():
    async def main():
        loop = asyncio.get_running_loop()
        assert loop.time() == 100.0
        await asyncio.sleep(0.0001)  # below the tick: still exact
        return loop.time()

    assert vt.run(main(), start=100.0, tick=0.01, quantum=0) == 100.0001


def test_deadlock_names_the_virtual_time_and_the_waiting_task():
    async def main():
        await asyncio.sleep(2.5)
        await asyncio.Event().wait()

    with pytest.raises(vt.DeadlockError, match=r"t=2\.5.*in main\(\)"):
        vt.run(main(), autojump_threshold=0)


def test_limit_stops_a_repeating_timer():
    async def main():
        loop = asyncio.get_running_loop()
        loop.wheel.call_every(1.0, lambda: None)  # forever
        await asyncio.Event().wait()

    t0 = time.monotonic()
    with pytest.raises(vt.TimeLimitError, match=r"limit t=60\.0"):
        vt.run(main(), limit=60)
    assert time.monotonic() - t0 < 10


def test_limit_counts_from_start():
    async def main():
        await asyncio.sleep(5)
        return asyncio.get_running_loop().time()

    assert vt.run(main(), start=10, limit=5, quantum=0) == 15.0
    with pytest.raises(vt.TimeLimitError):
        vt.run(asyncio.sleep(5.001), start=10, limit=5, quantum=0)
    # the iterations count too: main's first step took one quantum, so its
    # sleep(5) ends past start + 5
    with pytest.raises(vt.TimeLimitError, match=r"due at t=15\.00001, past the limit t=15\.0"):
        vt.run(main(), start=10, limit=5)


# Uses asyncio's policy system on purpose: deprecated from Python 3.14.
@pytest.mark.filterwarnings("ignore:.*polic:DeprecationWarning")
def test_loop_factory_policy_and_new_event_loop():
    async def main():
        await asyncio.sleep(10)
        loop = asyncio.get_running_loop()
        assert isinstance(loop, vt.VirtualEventLoop) and isinstance(loop, WheelEventLoop)
        return loop.time()

    factory = functools.partial(vt.new_event_loop, start=1.0)
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(main()) == 11.00002  # start + 10 + two quanta (see above)
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(vt.EventLoopPolicy(start=2.0, quantum=0))
    try:
        assert asyncio.run(main()) == 12.0
    finally:
        asyncio.set_event_loop_policy(old)


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"start": -1.0}, ValueError),
        ({"start": math.nan}, ValueError),
        ({"start": math.inf}, ValueError),
        ({"start": "0"}, TypeError),
        ({"limit": -1}, ValueError),
        ({"limit": math.nan}, ValueError),
        ({"autojump_threshold": -0.1}, ValueError),
        ({"timing": object()}, TypeError),
        ({"timing": 0.1}, TypeError),
    ],
)
def test_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        vt.VirtualEventLoop(**kwargs)
    coro = asyncio.sleep(0)
    with pytest.raises(exc):
        vt.run(coro, **kwargs)
    coro.close()


# ---- real work ------------------------------------------------------------------


def test_sockets_work_and_virtual_timeouts_still_fire():
    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        await loop.sock_sendall(a, b"ping")
        assert await loop.sock_recv(b, 4) == b"ping"
        # No reply ever comes: the virtual timeout fires after the real wait.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(loop.sock_recv(b, 4), 30)
        a.close()
        b.close()
        return loop.time()

    # the timeout fires 30 s after wait_for began, a few iterations (10 µs
    # each) into the run, and reaches main a few iterations later
    assert 30.0 < vt.run(main(), autojump_threshold=0.01) < 30.0 + 20e-5
    assert vt.run(main(), autojump_threshold=0.01, quantum=0) == 30.0


def test_streams_server_and_client_in_one_loop():
    async def main():
        async def handle(reader, writer):
            data = await reader.readline()
            await asyncio.sleep(5)  # virtual
            writer.write(data.upper())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello\n")
        reply = await reader.readline()
        writer.close()
        server.close()
        await server.wait_closed()
        return reply, asyncio.get_running_loop().time()

    reply, t = vt.run(main(), autojump_threshold=0.01, quantum=0)
    assert reply == b"HELLO\n" and t == 5.0
    # by default the connection's iterations (10 µs each) come on top
    reply, t = vt.run(main(), autojump_threshold=0.01)
    assert reply == b"HELLO\n" and 5.0 < t < 5.0 + 100e-5


def test_executor_threads_and_subprocess_are_waited_for():
    async def main():
        loop = asyncio.get_running_loop()
        # Outstanding real work holds the clock while the timer is far away.
        slow = loop.run_in_executor(None, time.sleep, 0.2)
        assert await asyncio.wait_for(slow, 10) is None
        assert loop.time() < 0.01  # a few iterations: no jump toward the 10 s timeout
        assert await asyncio.to_thread(sum, [1, 2, 3]) == 6
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import time; time.sleep(0.2); print('hi')",
            stdout=subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        assert out.strip() == b"hi" and proc.returncode == 0
        await asyncio.sleep(1)
        return loop.time()

    assert 1.0 < vt.run(main(), autojump_threshold=math.inf) < 1.01


def test_call_soon_threadsafe_from_a_thread():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        threading.Timer(0.05, loop.call_soon_threadsafe, (fut.set_result, 7)).start()
        return await fut  # no timer: the last-chance wait catches the thread

    assert vt.run(main(), autojump_threshold=1.0) == 7


def test_autojump_threshold_bounds_the_real_wait():
    async def main():
        # Watched but silent, and able to hear from outside the process: a
        # pipe (a socketpair's peer is in the process, so it is not waited for).
        r, w = os.pipe()
        loop = asyncio.get_running_loop()
        loop.add_reader(r, lambda: None)
        # Real time: time.monotonic() follows virtual time in the run (clocks=True).
        t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
        for _ in range(5):
            await asyncio.sleep(1)
        real = time.clock_gettime(time.CLOCK_MONOTONIC) - t0
        loop.remove_reader(r)
        os.close(r)
        os.close(w)
        return real

    real = vt.run(main(), autojump_threshold=0.05)
    assert real >= 5 * 0.05 * 0.9


def test_import_pywheel_testing_does_not_import_hypothesis():
    code = (
        "import sys, pywheel, pywheel.testing, pywheel.testing.pytest_plugin; "
        "assert 'hypothesis' not in sys.modules, 'hypothesis imported'"
    )
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
