"""The program's own clocks on virtual time (issue 20, point 3): while a
VirtualEventLoop runs, time.monotonic()/monotonic_ns()/perf_counter()/
perf_counter_ns()/time()/time_ns() called from its thread advance with its
virtual time; other threads, and the loop's thread when no virtual loop runs,
read real time; everything is put back afterwards, also after a crash; no
clock goes backwards while a loop runs or when a run starts."""

from __future__ import annotations

import asyncio
import datetime
import random
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers import run_pytest

from pywheel import testing as vt
from pywheel.testing import Timing

NAMES = ("monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns")
ALL = (*NAMES, "sleep")
ORIGINAL = {name: getattr(time, name) for name in ALL}


def real_monotonic() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)  # never swapped


def assert_restored():
    for name in ALL:
        assert getattr(time, name) is ORIGINAL[name], name


@pytest.mark.parametrize("name", NAMES)
def test_each_clock_advances_exactly_with_virtual_time(name):
    clock = getattr(time, name)  # bound now: the real function
    scale = 1e9 if name.endswith("_ns") else 1.0

    async def main():
        loop = asyncio.get_running_loop()
        f = getattr(time, name)  # looked up in the run, as programs do
        a, la = f(), loop.time()
        await asyncio.sleep(3600)
        b, lb = f(), loop.time()
        await asyncio.sleep(0.001)
        c, lc = f(), loop.time()
        return a, b, c, la, lb, lc

    r0 = clock()
    a, b, c, la, lb, lc = vt.run(main())
    r1 = clock()
    assert (b - a) / scale == pytest.approx(lb - la, abs=1e-6)
    assert (c - b) / scale == pytest.approx(lc - lb, abs=1e-6)
    # the sleep, and the iteration (one quantum, 10 µs) that ran the step it woke
    assert b - a == pytest.approx((3600 + 1e-5) * scale, abs=1e-7 * scale)
    # Anchored at the real reading when the run started.
    assert r0 <= a <= r1
    if name.endswith("_ns"):
        assert isinstance(a, int) and isinstance(b, int)
    assert_restored()


def test_wall_clock_is_real_wall_time_at_start_plus_virtual_elapsed():
    async def main():
        w0 = time.time()
        await asyncio.sleep(86400 * 3)
        return w0, time.time(), datetime.datetime.fromtimestamp(time.time())

    before = time.time()
    w0, w1, dt = vt.run(main(), start=50.0)
    assert before <= w0 <= time.time()
    assert w1 - w0 == pytest.approx(86400 * 3, abs=1e-3)
    assert dt - datetime.datetime.fromtimestamp(w0) > datetime.timedelta(days=2.9)


def test_other_threads_read_real_time_while_the_loop_runs():
    seen = {}
    go = threading.Event()
    done = threading.Event()

    def worker():
        go.wait(10)
        seen["m"] = time.monotonic() - real_monotonic()
        seen["w"] = time.time() - time.clock_gettime(time.CLOCK_REALTIME)
        seen["n"] = time.perf_counter_ns()
        done.set()

    th = threading.Thread(target=worker)
    th.start()

    async def main():
        await asyncio.sleep(10_000)  # the loop's clocks are far ahead now
        assert time.monotonic() - real_monotonic() > 9_000
        go.set()
        while not done.is_set():
            await asyncio.sleep(0.001)

    vt.run(main(), autojump_threshold=0.01)
    th.join()
    assert abs(seen["m"]) < 1.0 and abs(seen["w"]) < 1.0


def test_clocks_are_put_back_after_the_run_and_after_a_crash():
    async def crash():
        await asyncio.sleep(100)
        assert time.monotonic() is not ORIGINAL["monotonic"]
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        vt.run(crash())
    assert_restored()

    class Stop(BaseException):
        pass

    async def interrupted():
        await asyncio.sleep(1)
        raise Stop

    with pytest.raises(Stop):
        vt.run(interrupted())
    assert_restored()
    assert abs(time.monotonic() - real_monotonic()) < 1.0


def test_between_runs_the_loops_thread_reads_real_time_and_no_clock_goes_back():
    loop = vt.VirtualEventLoop()
    readings: list[tuple[str, float]] = []

    async def sample(d):
        for _ in range(3):
            readings.append(("in", time.monotonic()))
            await asyncio.sleep(d)
        readings.append(("in", time.monotonic()))

    try:
        readings.append(("out", time.monotonic()))
        loop.run_until_complete(sample(0.0))  # virtual time does not move
        time.sleep(0.05)  # real time passes outside the run
        assert time.monotonic is ORIGINAL["monotonic"]
        readings.append(("out", time.monotonic()))
        loop.run_until_complete(sample(5.0))
        readings.append(("out", time.monotonic()))
    finally:
        loop.close()
    ins = [v for k, v in readings if k == "in"]
    assert ins == sorted(ins)
    # A run starts at or after the real clock's reading: never back on entry.
    assert readings[0][1] <= readings[1][1]
    i = [k for k, _ in readings].index("out", 1)
    assert readings[i][1] <= readings[i + 1][1]


async def _read_all_clocks(rng, values):
    async def one():
        for _ in range(20):
            for n in NAMES:
                values[n].append(getattr(time, n)())
            await asyncio.sleep(rng.random() / 100)

    await asyncio.gather(*(one() for _ in range(5)))


@pytest.mark.parametrize("seed", range(5))
def test_no_clock_goes_backwards_under_a_timing(seed):
    rng = random.Random(seed)
    t = Timing(max_late=0.01, max_cost=0.005, draw=lambda n: rng.randint(0, n))
    values: dict[str, list] = {n: [] for n in NAMES}
    vt.run(_read_all_clocks(rng, values), timing=t)
    assert not t.punctual
    for n, vs in values.items():
        assert vs == sorted(vs), n


def test_clocks_false_leaves_the_clocks_real():
    async def main():
        assert time.monotonic is ORIGINAL["monotonic"]
        m0 = time.monotonic()
        await asyncio.sleep(3600)
        return time.monotonic() - m0

    assert vt.run(main(), clocks=False) < 5
    loop = vt.VirtualEventLoop(clocks=False)
    assert loop.clocks is False
    loop.close()
    with pytest.raises(TypeError):
        vt.VirtualEventLoop(clocks=1)


def test_two_loops_in_two_threads_each_read_their_own_time():
    out = {}
    barrier = threading.Barrier(2, timeout=10)

    def run(name, sleep_for):
        async def main():
            m0 = time.monotonic()
            barrier.wait()  # both runs active at once
            await asyncio.sleep(sleep_for)
            out[name] = time.monotonic() - m0
            barrier.wait()

        vt.run(main())

    threads = [
        threading.Thread(target=run, args=("a", 100.0)),
        threading.Thread(target=run, args=("b", 7.0)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    # each its sleep, and the iteration (one quantum, 10 µs) that ran the
    # step it woke
    assert out["a"] == pytest.approx(100.00001, abs=1e-7)
    assert out["b"] == pytest.approx(7.00001, abs=1e-7)
    assert_restored()


def test_a_loop_refused_on_a_busy_thread_does_not_take_the_clocks_away():
    async def main():
        other = vt.VirtualEventLoop()
        coro = asyncio.sleep(1)
        try:
            with pytest.raises(RuntimeError):
                other.run_until_complete(coro)
        finally:
            coro.close()
            other.close()
        m0 = time.monotonic()
        await asyncio.sleep(60)
        return time.monotonic() - m0

    assert vt.run(main()) == pytest.approx(60.0)
    assert_restored()


def test_a_patch_made_by_someone_else_is_respected():
    def fake():
        return 42.0

    time.monotonic = fake
    try:

        async def main():
            m0 = time.monotonic()
            await asyncio.sleep(5)
            return m0, time.monotonic()

        m0, m1 = vt.run(main())
        # anchored on what was there: 42 + loop.time(), which reads one
        # quantum (10 µs) in main's first step, 5 s and two quanta after it
        assert m0 == 42.0 + 1e-5 and m1 == 42.0 + 5.00002
        assert time.monotonic is fake  # put back: theirs
    finally:
        time.monotonic = ORIGINAL["monotonic"]
    assert_restored()


def test_datetime_now_stays_real():
    # Documented: the C datetime reads the system clock directly.
    async def main():
        await asyncio.sleep(86400 * 10)
        return datetime.datetime.now()

    now = vt.run(main())
    assert abs((now - datetime.datetime.now()).total_seconds()) < 60


def test_blocking_poll_on_the_loops_thread_ends():
    # time.sleep() on the loop's thread moves the program's clocks by the
    # real time slept: a blocking poll against time.monotonic() ends.  In a
    # child: on a mistake this would spin forever.
    code = textwrap.dedent(
        """
        import asyncio, time
        from pywheel import testing as vt

        async def main():
            loop = asyncio.get_running_loop()
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:
                time.sleep(0.01)
            return loop.time()

        # the loop's own clock did not move: main's one step, one quantum in
        assert vt.run(main()) == 1e-5
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


# ---- the marker, the fixture and the plugin's options ----------------------------

PLUGIN_TESTS = """
import asyncio, time
import pytest

@pytest.mark.virtual_time
async def test_default():
    m0 = time.monotonic()
    await asyncio.sleep(3600)
    print("DEFAULT", round(time.monotonic() - m0))

@pytest.mark.virtual_time(clocks=False)
async def test_off():
    m0 = time.monotonic()
    await asyncio.sleep(3600)
    print("OFF", round(time.monotonic() - m0))

@pytest.mark.virtual_time(clocks=True)
async def test_on():
    m0 = time.monotonic()
    await asyncio.sleep(3600)
    print("ON", round(time.monotonic() - m0))

def test_fixture(virtual_loop):
    async def main():
        m0 = time.monotonic()
        await asyncio.sleep(3600)
        return time.monotonic() - m0
    print("FIXTURE", round(virtual_loop.run_until_complete(main())))
"""


def _pytest(tmp_path, *args, ini=None):
    files = {"test_clocks_plugin.py": PLUGIN_TESTS}
    if ini is not None:
        files["pytest.ini"] = ini
    r = run_pytest(tmp_path, files, "-s", "-p", "no:asyncio", "-p", "no:anyio", *args)
    assert "4 passed" in r.stdout, r.stdout + r.stderr
    got = {}
    for line in r.stdout.splitlines():
        for word in ("DEFAULT", "OFF", "ON", "FIXTURE"):
            if word + " " in line:
                got[word] = int(line.split(word + " ")[1].split()[0])
    return got


def test_plugin_default_marker_and_options(tmp_path):
    assert _pytest(tmp_path) == {"DEFAULT": 3600, "OFF": 0, "ON": 3600, "FIXTURE": 3600}
    off = _pytest(tmp_path, "--virtual-time-clocks=off")
    assert off == {"DEFAULT": 0, "OFF": 0, "ON": 3600, "FIXTURE": 0}
    ini = _pytest(tmp_path, ini="[pytest]\nvirtual_time_clocks = false\n")
    assert ini == off
    both = _pytest(
        tmp_path, "--virtual-time-clocks=on", ini="[pytest]\nvirtual_time_clocks = false\n"
    )
    assert both["DEFAULT"] == 3600
