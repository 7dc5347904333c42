"""Virtual time moves while the program works (issue 27, finding 3).

Every loop iteration that does not jump to the next timer (callbacks were
ready, a timer was already due, I/O arrived) takes ``quantum`` virtual
seconds, as on a very fast real machine; a jump still lands exactly on the
next deadline.  A program that re-arms at a deadline it has reached, polls
the clock while it works, or measures a duration across an await then
behaves as on a real clock.  Each shape is checked against the stock loop
(its clock is real): where the property holds there, it holds here.

Before (100056b) the clock never moved while callbacks were ready: these
programs spun forever at 100 % CPU; each is capped here (``SPIN``) so that a
frozen clock fails the test instead of hanging it.
"""

import asyncio
import math
import socket

import pytest

from pywheel import testing
from pywheel.testing import DEFAULT_QUANTUM, TimeLimitError, VirtualEventLoop

#: Iterations after which a program counts as spinning (a frozen clock):
#: 100 times what the programs below need at the default quantum.
SPIN = 2_000_000


class Spun(AssertionError):
    pass


def on_stock(main):
    return asyncio.run(main())


def on_virtual(main, **kwargs):
    kwargs.setdefault("limit", 3600)
    return testing.run(main(), **kwargs)


def rearm(op, how, delay):
    """A callback that re-arms while ``loop.time() <= close`` (or ``<``),
    as aiohttp 3.10-3.11's keep-alive check does (``call_at(close)``), or
    polls with ``call_soon``; returns how many times it ran."""

    async def main():
        loop = asyncio.get_running_loop()
        close = loop.time() + delay
        done = loop.create_future()
        runs = 0

        def check():
            nonlocal runs
            runs += 1
            if runs > SPIN:
                done.set_exception(Spun(f"re-armed {SPIN} times at t={loop.time()!r}"))
            elif loop.time() <= close if op == "<=" else loop.time() < close:
                if how == "call_at":
                    loop.call_at(close, check)
                else:
                    loop.call_soon(check)
            else:
                done.set_result(loop.time())

        loop.call_at(close, check) if how == "call_at" else loop.call_soon(check)
        end = await done
        assert end > close if op == "<=" else end >= close
        return runs

    return main


@pytest.mark.parametrize("how", ["call_at", "call_soon"])
@pytest.mark.parametrize("op", ["<=", "<"])
def test_a_callback_rearming_at_a_reached_deadline_gets_past_it(op, how):
    assert on_stock(rearm(op, how, 0.002)) >= 1  # the oracle: a real clock moves on
    if how == "call_at":
        # 75.0: aiohttp's keep-alive close time from t=0; the jump lands
        # exactly on it, and the next iteration takes one quantum past it
        assert on_virtual(rearm(op, how, 75.0)) == (2 if op == "<=" else 1)
    else:
        # polling: one quantum (10 µs) per iteration; the first check runs
        # at 20 µs (the task's step took the first), close is 10 µs + 2 ms
        expected = 201 if op == "<=" else 200
        assert on_virtual(rearm(op, how, 0.002)) == expected


async def busy_wait(d=0.01):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + d
    n = 0
    while loop.time() < deadline:
        await asyncio.sleep(0)
        n += 1
        if n > SPIN:
            raise Spun(f"sleep(0) {SPIN} times at t={loop.time()!r}")
    return n


def test_a_sleep0_busy_wait_until_a_deadline_ends():
    assert on_stock(busy_wait) >= 1
    n = on_virtual(busy_wait)
    # one quantum per iteration (the task's step is one iteration each)
    assert n == round(0.01 / DEFAULT_QUANTUM), n


async def short_timeout():
    """A 1 µs asyncio.timeout around work that keeps callbacks ready."""
    n = 0
    try:
        async with asyncio.timeout(1e-6):
            while True:
                await asyncio.sleep(0)
                n += 1
                if n > SPIN:
                    raise Spun(f"the 1 µs timeout did not fire in {SPIN} iterations")
    except TimeoutError:
        return n


def test_a_1us_timeout_fires_around_work_that_keeps_callbacks_ready():
    assert on_stock(short_timeout) >= 0
    assert on_virtual(short_timeout) <= 2


async def duration_across_io():
    """Bytes through a socketpair of this process: the loop never sleeps
    (the reader is ready at once), yet the clocks move across the await."""
    import time

    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    try:
        reader, writer = await asyncio.open_connection(sock=a)
        t0, m0 = loop.time(), time.monotonic()
        await loop.sock_sendall(b, b"ping")
        assert await reader.readexactly(4) == b"ping"
        t1, m1 = loop.time(), time.monotonic()
        writer.close()
        await writer.wait_closed()
    finally:
        b.close()
    return t1 - t0, m1 - m0


def test_a_duration_measured_across_in_process_io_is_positive():
    real = on_stock(duration_across_io)
    assert real[0] > 0 and real[1] > 0
    loop_d, mono_d = on_virtual(duration_across_io)
    assert loop_d > 0 and mono_d > 0
    assert loop_d == pytest.approx(mono_d, abs=1e-9)  # the clocks agree


async def duration_without_yielding():
    """A duration timed around an await that never yields to the loop (an
    AsyncMock, a cached result): no loop iteration passes."""
    import time

    async def cached():
        return 1

    readings = []
    for clock in (time.monotonic, time.perf_counter, time.time):
        t0 = clock()
        await cached()
        readings.append(clock() - t0)
    for clock in (time.monotonic_ns, time.perf_counter_ns, time.time_ns):
        t0 = clock()
        await cached()
        readings.append(clock() - t0)
    return readings


def test_the_program_clocks_never_read_the_same_twice():
    # the stock loop's real clocks move between two reads (redis-py's
    # connection-pool timings assert it); on virtual time each read within
    # one iteration is at least a nanosecond past the last
    assert all(d >= 0 for d in on_stock(duration_without_yielding))
    got = on_virtual(duration_without_yielding)
    assert all(d > 0 for d in got), got
    assert all(d < 1e-6 for d in got[:3]) and all(d < 1000 for d in got[3:]), got


def test_a_jump_lands_exactly_on_the_deadline():
    async def main():
        loop = asyncio.get_running_loop()
        seen = []
        for when in (5.0, 75.0, 1 / 3 + 100):
            fut = loop.create_future()
            loop.call_at(when, lambda w=when, f=fut: f.set_result(loop.time()))
            seen.append((when, await fut))
        return seen

    for when, t in on_virtual(main):
        # the timer's callback reads its deadline, as the wheel keeps it
        # (whole nanoseconds, never early): no quantum on a jump
        assert when <= t < when + 1e-9


def test_sleep_measures_its_delay_plus_the_iterations_it_took():
    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(1)
        return t0, loop.time()

    # t0: the task's first step, one iteration (10 µs) in; the timer is due
    # at t0 + 1 and the step it wakes runs one iteration after that jump.
    assert on_virtual(main) == (1e-5, 1.00002)
    assert on_virtual(main, quantum=0) == (0.0, 1.0)  # exact readings
    assert on_virtual(main, quantum=1e-6) == (1e-6, 1.000002)


def test_same_program_same_readings():
    async def main():
        loop = asyncio.get_running_loop()
        readings = []

        async def worker(k):
            for _ in range(5):
                await asyncio.sleep(0.001 * k)
                readings.append((k, loop.time()))
                await asyncio.sleep(0)

        await asyncio.gather(*(worker(k) for k in range(4)))
        return readings

    first = on_virtual(main)
    assert all(on_virtual(main) == first for _ in range(3))


def test_the_quantum_never_carries_the_clock_past_the_limit():
    loop = VirtualEventLoop(limit=0.001)
    try:
        with pytest.raises(TimeLimitError, match="quantum=1e-05"):
            loop.run_until_complete(busy_wait(1.0))
        assert loop.time() == 0.001
    finally:
        loop.close()


def test_quantum_is_checked():
    for bad in (-1e-6, math.nan, math.inf, 1e-10):
        with pytest.raises(ValueError, match="quantum"):
            VirtualEventLoop(quantum=bad)
    with pytest.raises(TypeError, match="quantum"):
        VirtualEventLoop(quantum=True)
    loop = VirtualEventLoop()
    assert loop.quantum == DEFAULT_QUANTUM == 1e-5
    loop.close()
    loop = testing.new_event_loop(quantum=0)
    assert loop.quantum == 0.0
    loop.close()


def test_the_quantum_moves_the_clock_by_at_least_one_float_step():
    async def main():
        return await busy_wait(1e-3)

    # 2**53 ns: past it a nanosecond is below one float step of the clock
    assert on_virtual(main, start=2.0**53 / 1e9 * 4, limit=None) >= 1


QUANTUM_SUITE = """
import asyncio
import pytest


def test_asyncio_run_loop():
    async def main():
        await asyncio.sleep(1)
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert type(loop).__name__ == "VirtualEventLoop"
    assert loop.quantum == EXPECTED


def test_fixture(virtual_loop):
    assert virtual_loop.quantum == EXPECTED


@pytest.mark.virtual_time(quantum=2e-6)
async def test_marker_wins():
    assert asyncio.get_running_loop().quantum == 2e-6
"""


@pytest.mark.parametrize("option", [None, "0", "1e-06"])
def test_pytest_option_sets_the_quantum_of_every_loop(tmp_path, option):
    from helpers import run_pytest

    expected = DEFAULT_QUANTUM if option is None else float(option)
    suite = QUANTUM_SUITE.replace("EXPECTED", repr(expected))
    args = ["--virtual-time"] + ([f"--virtual-time-quantum={option}"] if option else [])
    r = run_pytest(tmp_path, {"test_q.py": suite}, *args, timeout=300)
    assert "3 passed" in r.stdout, r.stdout + r.stderr


def test_pytest_option_refuses_a_bad_quantum(tmp_path):
    from helpers import run_pytest

    r = run_pytest(tmp_path, {"test_q.py": "def test_x(): pass\n"}, "--virtual-time-quantum=-1")
    assert r.returncode == 4, r.stderr
    assert "--virtual-time-quantum: '-1' is out of range: it takes 0, or seconds" in r.stderr
