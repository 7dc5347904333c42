"""A deadline is never early against the float the program compared.

A float time becomes the first nanosecond that reads, as time() and when()
read nanoseconds (the float nearest to ns / 10**9), at least that float.  So
a callback that re-arms ``call_at(deadline)`` until ``time() >= deadline``
(anyio's CancelScope does) ends after at most one extra run, on virtual time
as on a real clock; rounding to the nearest nanosecond could land a hair below
the float and freeze virtual time on it.  The loops collect what is due as
the stock loop does (``when < time() + clock_resolution``), and next_when()
answers the least when() of the pending timers, overdue ones included.
"""

import asyncio
import heapq
import itertools
import math
from fractions import Fraction

import pytest
from helpers import first_ns_reading_at_least
from hypothesis import given, settings
from hypothesis import strategies as st

import pywheel
from pywheel import testing as vt
from pywheel.asyncio import WheelEventLoop

MAX_REARMS = 3


class _StockJumpSelector:
    def __init__(self, sel, loop):
        self._sel, self._loop = sel, loop

    def __getattr__(self, name):
        return getattr(self._sel, name)

    def select(self, timeout=None):
        loop = self._loop
        loop.selects += 1
        if loop.selects > 10_000:  # a loop that spins: fail, never hang
            raise RuntimeError("virtual clock loop: 10,000 iterations")
        events = self._sel.select(0)
        if events or (timeout is not None and timeout <= 0):
            return events
        loop.now = max(loop.now, loop.next_deadline())
        return []


class _FifoTimerHandle(asyncio.TimerHandle):
    __slots__ = ("_seq",)

    def __lt__(self, other):
        return (self._when, self._seq) < (other._when, other._seq)


class StockVirtualLoop(asyncio.SelectorEventLoop):
    """The oracle: BaseEventLoop._run_once itself, time() jumping to the
    heap's head (FIFO among equal deadlines, as pywheel)."""

    def __init__(self, start=0.0):
        self.now = start
        self.selects = 0
        self._seq = itertools.count()
        super().__init__()
        self._selector = _StockJumpSelector(self._selector, self)
        self._clock_resolution = 1e-9

    def time(self):
        return self.now

    def next_deadline(self):
        return self._scheduled[0]._when

    def call_at(self, when, callback, *args, context=None):
        timer = _FifoTimerHandle(when, callback, args, self, context)
        timer._seq = next(self._seq)
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer


class WheelJumpLoop(WheelEventLoop):
    """WheelEventLoop's own _run_once and wheel, on a clock that jumps to
    next_when() (not pywheel.testing: the loop and the core alone)."""

    def __init__(self, start=0.0, tick=0.001):
        self.now = start
        self.selects = 0
        super().__init__(tick=tick)
        self._selector = _StockJumpSelector(self._selector, self)
        self._clock_resolution = 1e-9

    def time(self):
        return self.now

    def next_deadline(self):
        return self._wheel.next_when()


def rearm_until_due(loop, delay):
    """Runs anyio's pattern on loop; returns how many times it re-armed, or
    raises once that passes MAX_REARMS (a livelock, bounded)."""
    fut = loop.create_future()
    deadline = loop.time() + delay
    rearms = 0

    def cb():
        nonlocal rearms
        if loop.time() >= deadline:
            fut.set_result(rearms)
        elif rearms >= MAX_REARMS:
            fut.set_exception(
                AssertionError(f"re-armed {rearms} times: time()={loop.time()!r} < {deadline!r}")
            )
        else:
            rearms += 1
            loop.call_at(deadline, cb)

    loop.call_at(deadline, cb)
    return loop.run_until_complete(fut)


starts = st.one_of(
    st.floats(0, 10, allow_nan=False),
    st.integers(0, 10**10).map(lambda n: n / 1e9),  # whole nanoseconds, as in the issue
    st.floats(1e6, 2e8, allow_nan=False),  # where floats are coarser than 1 ns
)
delays = st.one_of(
    st.floats(0, 5, allow_nan=False),
    st.sampled_from([0.0, 1e-9, 0.1, 0.3, 1.0]),
    st.integers(0, 10**9).map(lambda n: n / 1e9),
)
ticks = st.sampled_from([1e-9, 1e-6, 0.001, 0.1, 1.0, 3.0])


@settings(max_examples=300, deadline=None)
@given(start=starts, delay=delays, tick=ticks)
def test_rearming_until_the_deadline_ends_on_every_loop(start, delay, tick):
    if start + delay < 2**23:
        # Past 2**24 s, time() + 1e-9 == time(): the stock loop's own rule,
        # when < time() + resolution, then never takes a timer due exactly
        # now, and on a clock that only jumps it spins (a real clock moves
        # on).  pywheel's loops take when() <= time() there too.
        stock = StockVirtualLoop(start)
        try:
            assert rearm_until_due(stock, delay) <= MAX_REARMS  # the oracle ends too
        finally:
            stock.close()
    ours = WheelJumpLoop(start, tick)
    try:
        assert rearm_until_due(ours, delay) <= 1
    finally:
        ours.close()
    virtual = vt.VirtualEventLoop(start=start, tick=tick, limit=delay + 10)
    try:
        assert rearm_until_due(virtual, delay) <= 1
    finally:
        virtual.close()


def test_the_issues_example_ends_at_once():
    loop = vt.VirtualEventLoop(start=0.350000001)
    try:
        assert rearm_until_due(loop, 0.1) == 0
        assert loop.time() >= 0.350000001 + 0.1
    finally:
        loop.close()


@settings(max_examples=30, deadline=None)
@given(delay=st.floats(0, 0.002, allow_nan=False))
def test_rearming_on_the_real_clock_ends(delay):
    loop = WheelEventLoop()
    try:
        assert rearm_until_due(loop, delay) <= MAX_REARMS
    finally:
        loop.close()


# ---- the core's rule: what a float time becomes --------------------------


@settings(max_examples=500, deadline=None)
@given(
    x=st.one_of(
        st.floats(0, 9.2e9, allow_nan=False),
        st.floats(0, 10, allow_nan=False),
        st.floats(4e6, 5e6, allow_nan=False),
        st.integers(0, 9223372035).map(float),
    )
)
def test_a_float_time_is_the_first_nanosecond_that_reads_at_least_it(x):
    w = pywheel.ManualWheel(start=x)
    n = first_ns_reading_at_least(x)
    assert w.time_ns() == n
    assert w.time() == n / 10**9 >= x  # Python's own ns -> seconds
    h = w.call_at(x, print)
    assert h.when() == w.time()
    assert w.run_due(h.when()) == 1


def _edge_floats(rng):
    """Every binade the clock's range meets, its powers of two and their
    neighbours (where the float below is half a step away), exact readings
    of whole nanoseconds and the floats next to them."""
    for e in range(-1074, 34):
        p = 2.0**e
        yield from (p, math.nextafter(p, 0), math.nextafter(p, math.inf))
        yield p * (1 + rng.random())
    for _ in range(3000):
        r = rng.randrange(0, 9223372036 * 10**9) // 10 ** rng.randrange(0, 12) / 10**9
        yield from (r, math.nextafter(r, 0), math.nextafter(r, math.inf))


def test_the_first_reading_at_least_a_float_across_every_binade():
    # the rule is taken without a division in C (conversions.c, ceil_pos),
    # from the float's bits: checked against Python's exact fractions
    import random

    rng = random.Random(22)
    w = pywheel.ManualWheel()
    for x in _edge_floats(rng):
        if x >= 9223372036.0:
            continue
        assert pywheel.ManualWheel(start=x).time_ns() == first_ns_reading_at_least(x), x
        n = first_ns_reading_at_least(-x) if x else 0
        assert w.call_at(-x, print).when() == n / 10**9, -x


@settings(max_examples=500, deadline=None)
@given(s=st.integers(0, 9223372035), r=st.integers(0, 10**9 - 1))
def test_time_and_when_read_nanoseconds_as_python_divides_them(s, r):
    w = pywheel.ManualWheel(start=s)
    w.advance(Fraction(r, 10**9))
    n = s * 10**9 + r
    assert w.time_ns() == n
    assert w.time() == n / 10**9
    assert w.call_later(0, print).when() == n / 10**9
    assert w.call_later(-s, print).when() == r / 10**9
    k = min(2 * s, 9223372036)
    assert w.call_later(-k, print).when() == (n - k * 10**9) / 10**9  # negative


def test_whole_seconds_read_exactly_at_any_magnitude():
    # (double)ns / 1e9 reads 21% of whole seconds past 2**53 ns below them.
    for s in (9007199, 123456789, 5620474481, 6135753745, 8268670469, 9223372036):
        w = pywheel.ManualWheel(start=s)
        assert w.time() == s and w.time_ns() == s * 10**9
        h = w.call_at(s, print)
        assert h.when() == s and w.advance_to(s) == 1


def test_a_manual_wheel_advanced_to_a_computed_deadline_runs_it():
    w = pywheel.ManualWheel(tick=1e-9, start=0.350000001)
    deadline = w.time() + 0.1  # 0.45000000100000004: no nanosecond reads it
    ran = []
    h = w.call_at(deadline, ran.append, 1)
    assert h.when() >= deadline
    assert w.advance_to(deadline) == 1 and ran == [1]
    assert w.time() >= deadline


def test_run_due_takes_exactly_the_timers_whose_when_is_at_most_its_argument():
    w = pywheel.ManualWheel(start=0.350000001)
    ran = []
    h = w.call_at(w.time() + 0.1, ran.append, 1)
    assert w.run_due(math.nextafter(h.when(), 0)) == 0 and w.time() < h.when()
    assert w.run_due(h.when()) == 1 and ran == [1]


# ---- collecting as the stock loop does (virtual time: deterministic) ------


def _chain_and_timer_program(trace, ahead):
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.350000001)
        t = loop.time()

        def mark(name):
            trace.append((name, loop.time() - t))

        def chain(n):
            mark(f"soon{n}")
            if n:
                loop.call_soon(chain, n - 1)

        loop.call_at(t + ahead, mark, "timer")
        loop.call_soon(chain, 3)
        await asyncio.sleep(0.01)

    return main


def _run(loop, main):
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_timer_one_nanosecond_ahead_runs_after_the_ready_chain():
    for ahead in (1e-9, 2e-9, 3e-9):
        want, got, virtual = [], [], []
        _run(StockVirtualLoop(), _chain_and_timer_program(want, ahead))
        _run(WheelJumpLoop(), _chain_and_timer_program(got, ahead))
        # quantum=0: nanosecond ties, as the stock loop's clock reads them
        _run(vt.VirtualEventLoop(quantum=0), _chain_and_timer_program(virtual, ahead))
        assert [n for n, _ in want] == ["soon3", "soon2", "soon1", "soon0", "timer"], want
        # The order is the stock loop's; the timer's deadline is the first
        # nanosecond reading at least t + ahead, so it may read a hair later.
        for trace in (got, virtual):
            assert [n for n, _ in trace] == [n for n, _ in want]
            assert trace[:4] == want[:4]
            assert want[4][1] <= trace[4][1] < want[4][1] + 2e-9


def _zero_delay_program(seen):
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.350000001)
        t = loop.time()
        done = loop.create_future()
        loop.call_later(0, lambda: done.set_result(loop.time() - t))
        seen.append(await done)

    return main


@pytest.mark.parametrize("tick", [1e-9, 0.001])
def test_a_zero_delay_timer_with_nothing_ready_runs_without_moving_the_clock(tick):
    want, got, virtual = [], [], []
    _run(StockVirtualLoop(), _zero_delay_program(want))
    _run(WheelJumpLoop(tick=tick), _zero_delay_program(got))
    _run(vt.VirtualEventLoop(tick=tick, quantum=0), _zero_delay_program(virtual))
    assert want == [0.0]
    assert got == want and virtual == want


def test_next_when_is_the_least_when_of_the_pending_timers_overdue_or_not():
    w = pywheel.ManualWheel(tick=0.001)
    w.run_due(0.0105)  # time 10.5 ms: ticks up to 10 are behind the wheel
    h1 = w.call_at(0.0102, print)  # overdue, in the tick being passed
    assert w.next_when() == h1.when()
    h2 = w.call_at(0.0052, print)  # overdue, on the expired list
    assert w.next_when() == h2.when()
    h3 = w.call_at(-5.0, print)  # before the clock's epoch
    assert w.next_when() == h3.when()
    for h in (h1, h2, h3):
        h.cancel()
    assert w.next_when() is None
    w.call_at(0.2, print)
    assert w.collect_due(0.5) == 1
    assert w.next_when() == 0.2  # set aside, not run: still pending, overdue
    w.close()


@settings(max_examples=500, deadline=None)
@given(
    now=st.floats(1.0, 2.0**23, allow_nan=False),
    ahead=st.one_of(st.just(0.0), st.floats(-3e-9, 3e-9), st.floats(-1e-6, 1e-6)),
)
def test_the_loops_collection_runs_every_timer_at_or_before_time(now, ahead):
    # WheelEventLoop's rule for one iteration whose time() read `now` (any
    # float: a mock can freeze it between two nanoseconds): a timer whose
    # deadline float is at most now always runs; one whose when() is below
    # now + 1 ns runs, as on the stock loop; none runs more than one reading
    # past now.
    w = pywheel.ManualWheel(0.001, start=0.5)
    when = now + ahead
    end = now + 1e-9
    end = math.nextafter(end, -math.inf) if end > now else now
    h = w.call_at(when, lambda: None)
    n = w._collect_for_loop(end, now)
    collected = n == 1
    if when <= now:
        assert collected
    if h.when() <= end:
        assert collected
    if collected:
        reach = max(end, first_ns_reading_at_least(now) / 10**9)
        assert h.when() <= reach
    assert w.time() >= now - 1e-9  # time moved to the target, never back
    w.run_collected()
    w.close()


def test_the_loops_collection_never_moves_time_back():
    w = pywheel.ManualWheel(0.001, start=10.0)
    h = w.call_at(10.0, lambda: None)
    assert w._collect_for_loop(5.0, 5.0) == 1  # the wheel's own time() is the floor
    assert w.time() == 10.0
    assert not h.cancelled()
    with pytest.raises(ValueError):
        w._collect_for_loop(math.nan, 11.0)
    assert w._collect_for_loop(10.5, "not a float") == 1  # now only ever raises the target
    w.close()
