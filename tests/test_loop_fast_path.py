"""WheelEventLoop's call_later and call_at in C (outside debug mode) keep
every behaviour of the Python methods they stand in for.

The C methods (``pywheel._core._LoopTimers``) take the common call
themselves and hand everything else to ``WheelEventLoop.call_later`` /
``call_at``; each test here puts the fast path side by side with an oracle:
the Python method on the same loop, and the stock selector loop where it has
an opinion (error types and messages, closed loops, threads).
"""

import asyncio
import contextvars
import decimal
import fractions
import functools
import gc
import math
import sys
import threading
import tracemalloc
import weakref
from unittest import mock

import pytest
from helpers import is_fast, outcome_of

import pywheel.asyncio as pwa
import pywheel.testing as pwt
from pywheel import _core

PY_LATER = pwa.WheelEventLoop.call_later
PY_AT = pwa.WheelEventLoop.call_at


def cb(*args):
    pass


async def coro_fn():
    pass


class NotCallable:
    pass


@pytest.fixture
def loop():
    lp = pwa.WheelEventLoop()
    yield lp
    lp.close()


@pytest.fixture
def stock():
    lp = asyncio.SelectorEventLoop()
    yield lp
    lp.close()


def same(fast, slow, later):
    """Equal outcomes; for call_later two readings of the clock a moment
    apart give two deadlines by the same rule."""
    if later and fast[0] == slow[0] == "ok" and math.isfinite(fast[1]):
        return abs(fast[1] - slow[1]) < 60
    return fast == slow


def normalise(msg):
    # The Python methods are WheelEventLoop's; the stock loop's BaseEventLoop's.
    return msg.replace("WheelEventLoop.", "").replace("BaseEventLoop.", "")


# ('ok', when()) or (exception type, normalised message); the handle is cancelled.
outcome = outcome_of(when=True, message=normalise)


# ---- which methods run ---------------------------------------------------


def test_the_methods_are_the_c_ones_outside_debug_mode(loop):
    assert is_fast(loop.call_later) and is_fast(loop.call_at)
    assert loop.call_later.__self__ is loop.call_at.__self__


def test_debug_mode_switches_to_the_python_methods_and_back(loop):
    loop.set_debug(True)
    assert loop.call_later.__func__ is PY_LATER and loop.call_at.__func__ is PY_AT
    h = loop.call_later(10, cb)
    assert isinstance(h, asyncio.TimerHandle)  # debug mode's handles
    h.cancel()
    loop.set_debug(False)
    assert is_fast(loop.call_later) and is_fast(loop.call_at)
    assert not isinstance(loop.call_later(10, cb), asyncio.TimerHandle)


def test_a_loop_made_in_debug_mode_starts_on_the_python_methods(monkeypatch):
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    lp = pwa.WheelEventLoop()
    try:
        assert lp.get_debug()
        assert lp.call_later.__func__ is PY_LATER and lp.call_at.__func__ is PY_AT
    finally:
        lp.close()


def test_runner_debug_true_runs_the_python_methods():
    async def main():
        lp = asyncio.get_running_loop()
        return getattr(lp.call_later, "__func__", None) is PY_LATER, is_fast(lp.call_at)

    assert pwa.run(main(), debug=True) == (True, False)
    assert pwa.run(main(), debug=False) == (False, True)


def test_debug_mode_set_by_assignment_is_still_honoured(loop):
    # set_debug() is how asyncio switches, but a direct write of _debug
    # (private, yet seen in the wild) reaches the Python path too.
    loop._debug = True
    with pytest.raises(TypeError, match="coroutines cannot be used with call_at"):
        loop.call_later(1, coro_fn)
    with pytest.raises(TypeError, match="coroutines cannot be used with call_at"):
        loop.call_at(1, coro_fn)
    loop._debug = False


def test_subclasses_with_their_own_clock_or_methods_keep_them():
    class OwnTime(pwa.WheelEventLoop):
        def time(self):
            return 1000.0

    class OwnCallAt(pwa.WheelEventLoop):
        def call_at(self, when, callback, *args, context=None):
            self.seen = when
            return super().call_at(when, callback, *args, context=context)

    for cls in (OwnTime, OwnCallAt, pwt.VirtualEventLoop):
        lp = cls()
        try:
            assert not is_fast(lp.call_later) and not is_fast(lp.call_at), cls
        finally:
            lp.close()
    lp = OwnTime()
    try:
        assert lp.call_later(5, cb).when() == 1005.0
    finally:
        lp.close()


def test_a_method_replaced_on_the_instance_is_what_call_later_calls(loop):
    # The stock call_later calls self.call_at(self.time() + delay, ...).
    with mock.patch.object(loop, "call_at") as at:
        loop.call_later(5, cb, 1)
    (when, callback, arg), kw = at.call_args
    assert callback is cb and arg == 1 and kw == {"context": None}
    assert is_fast(loop.call_at)  # put back by the patch
    with mock.patch.object(loop, "time", return_value=100.0):
        assert loop.call_later(5, cb).when() == 105.0
    loop.set_debug(True)
    loop.set_debug(False)
    replacement = mock.Mock()
    loop.call_at = replacement
    loop.set_debug(True)
    loop.set_debug(False)
    assert loop.call_at is replacement  # set_debug leaves another's method alone


# ---- errors: the Python path's, and the stock loop's ------------------------

ODD_WHENS = [
    None,
    math.nan,
    "1",
    b"1",
    [],
    decimal.Decimal("1.5"),
    decimal.Decimal("nan"),
    fractions.Fraction(3, 2),
    True,
    10**30,
    -(10**30),
    10**400,
    1e300,
    -1e300,
    math.inf,
    -math.inf,
    9223372036.9,
    -9223372036.9,
]


@pytest.mark.parametrize("value", ODD_WHENS, ids=repr)
def test_call_at_odd_times_as_the_python_path(loop, value):
    assert outcome(loop.call_at, value, cb) == outcome(PY_AT, loop, value, cb)


@pytest.mark.parametrize("value", ODD_WHENS, ids=repr)
def test_call_later_odd_delays_as_the_python_path(loop, value):
    fast, slow = outcome(loop.call_later, value, cb), outcome(PY_LATER, loop, value, cb)
    assert same(fast, slow, later=True), (fast, slow)


BAD_CALLS = [
    ((1,), {}),
    ((), {}),
    ((1, 1), {}),
    ((1, NotCallable()), {}),
    ((1, cb), {"context": 1}),
    ((1, cb), {"contxt": None}),
    ((1,), {"callback": cb}),
    ((1, cb), {"callback": cb}),
    ((None, 1), {}),
    ((math.nan, 1), {}),
]


@pytest.mark.parametrize("args, kw", BAD_CALLS, ids=repr)
def test_bad_calls_fail_as_the_python_path(loop, args, kw):
    assert outcome(loop.call_at, *args, **kw) == outcome(PY_AT, loop, *args, **kw)
    fast, slow = outcome(loop.call_later, *args, **kw), outcome(PY_LATER, loop, *args, **kw)
    assert same(fast, slow, later=True), (fast, slow)


# What the stock loop itself refuses (outside debug mode it takes any `when`
# and any callback: a heap accepts them).
STOCK_REFUSES = [
    ("call_at", (None, cb), {}),
    ("call_later", (None, cb), {}),
    ("call_later", ("1", cb), {}),
    ("call_later", (decimal.Decimal(1), cb), {}),
    ("call_at", (1,), {}),
    ("call_later", (1,), {}),
    ("call_at", (), {}),
    ("call_later", (), {}),
    ("call_at", (1, cb), {"contxt": None}),
    ("call_later", (1, cb), {"contxt": None}),
    ("call_at", (1, cb), {"callback": cb}),
]


@pytest.mark.parametrize("name, args, kw", STOCK_REFUSES, ids=repr)
def test_errors_the_stock_loop_raises_are_its_own(loop, stock, name, args, kw):
    mine = outcome(getattr(loop, name), *args, **kw)
    theirs = outcome(getattr(stock, name), *args, **kw)
    assert mine[0] is theirs[0] and mine[0] != "ok", (mine, theirs)
    assert mine[1] == theirs[1], (mine, theirs)


def test_keyword_calls_work_as_on_the_stock_loop(loop, stock):
    for lp in (loop, stock):
        h = lp.call_at(when=lp.time() + 5, callback=cb)
        assert h.when() > lp.time()
        h.cancel()
        h = lp.call_later(delay=5, callback=cb)
        assert h.when() > lp.time()
        h.cancel()


def test_coroutine_functions_are_refused_in_debug_mode_as_stock(loop, stock):
    for lp in (loop, stock):
        lp.set_debug(True)
    for name in ("call_at", "call_later"):
        mine, theirs = (
            outcome(getattr(loop, name), 1, coro_fn),
            outcome(getattr(stock, name), 1, coro_fn),
        )
        assert mine == theirs and mine[0] is TypeError
        mine, theirs = outcome(getattr(loop, name), 1, 1), outcome(getattr(stock, name), 1, 1)
        assert mine == theirs and mine[0] is TypeError


def test_a_closed_loop_refuses_as_stock(stock):
    lp = pwa.WheelEventLoop()
    lp.close()
    stock.close()
    for name in ("call_at", "call_later"):
        mine = outcome(getattr(lp, name), 1, cb)
        assert mine == outcome(getattr(stock, name), 1, cb)
        assert mine == (RuntimeError, "Event loop is closed")


def test_a_loop_marked_closed_refuses_before_its_wheel_closes(loop):
    loop._closed = True  # as BaseEventLoop.close() does first
    for method in (loop.call_at, loop.call_later):
        assert outcome(method, 1, cb) == (RuntimeError, "Event loop is closed")
    loop._closed = False
    loop.call_later(1, cb).cancel()


def test_the_methods_outliving_their_loop_refuse_as_a_closed_loop():
    lp = pwa.WheelEventLoop()
    later, at = lp.call_later, lp.call_at
    lp.close()
    del lp
    gc.collect()
    for method in (later, at):
        assert outcome(method, 1, cb) == (RuntimeError, "Event loop is closed")


# ---- deadlines --------------------------------------------------------------

TIMES = [0, 1, 0.1, 1e-9, 3e-10, 1234.5678901234, 2.0**24 + 0.1, 1e9 + 0.3, -5.5, -1e-10]


@pytest.mark.parametrize("when", TIMES, ids=repr)
def test_call_at_deadlines_are_the_python_paths(loop, when):
    for w in (when, loop.time() + when):
        a, b = loop.call_at(w, cb), PY_AT(loop, w, cb)
        assert a.when() == b.when() and a.when() >= w
        assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize("delay", [0, 1, 0.1, 1e-9, 7e-10, 30.000000001, -1, -1e-9, 3, 1e6])
def test_call_later_is_call_at_time_plus_delay_in_floats(loop, delay):
    # Between two readings of the clock, and exactly the call_at rule of
    # some float time() + delay: never before t0 + delay.
    t0 = loop.time()
    h = loop.call_later(delay, cb)
    t1 = loop.time()
    lo = loop.wheel.call_at(t0 + delay, cb)
    hi = loop.wheel.call_at(t1 + delay, cb)
    assert lo.when() <= h.when() <= hi.when()
    assert h.when() >= t0 + delay
    for x in (h, lo, hi):
        x.cancel()


def test_an_int_delay_converts_as_float_plus_int(loop):
    t0 = loop.time()
    h = loop.call_later(2**30, cb)
    assert loop.wheel.call_at(t0 + 2.0**30, cb).when() <= h.when()
    assert loop.call_later(2**53 + 1, cb).when() == PY_LATER(loop, 2**53 + 1, cb).when()
    assert loop.call_later(-(2**70), cb).when() == -math.inf
    for fn in (loop.call_later, functools.partial(PY_LATER, loop)):
        with pytest.raises(OverflowError, match="too large to convert to float"):
            fn(10**400, cb)  # as float + int does


def test_timers_scheduled_by_the_fast_path_run_in_order(loop):
    ran = []
    t = loop.time()
    loop.call_at(t + 0.02, ran.append, 3)
    loop.call_later(0.01, ran.append, 2)
    loop.call_at(t, ran.append, 1)
    loop.call_at(t + 0.02, ran.append, 4)  # equal deadline: scheduling order
    loop.call_later(-1, ran.append, 0)
    loop.run_until_complete(asyncio.sleep(0.05))
    assert ran == [0, 1, 2, 3, 4]


# ---- handles ---------------------------------------------------------------


def test_handles_keep_the_stock_contract(loop):
    h = loop.call_later(10, cb, 1)
    assert h.cancel() is None and h.cancelled()
    assert h.cancel() is None and h.cancelled()
    a, b = loop.call_at(100.0, cb, 1), PY_AT(loop, 100.0, cb, 1)
    c = loop.call_at(200.0, cb)
    assert a == b and hash(a) == hash(b) and a < c and c > b and a <= b
    ran = []
    h = loop.call_later(0, ran.append, 1)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert ran == [1] and not h.cancelled()
    assert h.cancel() is None and h.cancelled()  # stock: True after a late cancel


def test_context_argument_as_the_python_path(loop):
    var = contextvars.ContextVar("v")
    ctx = contextvars.copy_context()
    ctx.run(var.set, 5)
    seen = []
    loop.call_later(0, lambda: seen.append(var.get(None)), context=ctx)
    loop.call_at(loop.time(), lambda: seen.append(var.get(None)), context=None)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert seen == [5, None]
    assert outcome(loop.call_later, 1, cb, context=1) == outcome(PY_LATER, loop, 1, cb, context=1)


# ---- threads -----------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_calls_from_another_thread_are_checked_as_stock(debug):
    def probe(lp):
        lp.set_debug(debug)
        ready = threading.Event()
        lp.call_soon(ready.set)
        t = threading.Thread(target=lp.run_forever)
        t.start()
        ready.wait(30)
        try:
            got = [outcome(lp.call_later, 100, cb)[0], outcome(lp.call_at, 1e9, cb)[0]]
        finally:
            lp.call_soon_threadsafe(lp.stop)
            t.join(30)
            lp.close()
        return got

    mine, theirs = probe(pwa.WheelEventLoop()), probe(asyncio.SelectorEventLoop())
    assert mine == theirs
    assert mine == ([RuntimeError] * 2 if debug else ["ok"] * 2)


# ---- references ------------------------------------------------------------


def test_no_reference_is_leaked_on_any_path(loop):
    arg = object()
    before = sys.getrefcount(cb), sys.getrefcount(arg)
    for _ in range(2000):
        loop.call_later(5, cb, arg).cancel()
        loop.call_at(5.0, cb, arg, context=None).cancel()
        loop.call_at(5, cb, arg).cancel()
        loop.call_later(5, cb, arg, context=contextvars.copy_context()).cancel()
        for fn in (loop.call_later, loop.call_at):
            with pytest.raises(ValueError):
                fn(math.nan, cb, arg)
            with pytest.raises(TypeError):
                fn(None, cb, arg)
            with pytest.raises(TypeError):
                fn(1, cb, arg, bogus=1)
            fn(fractions.Fraction(1), cb, arg).cancel()  # handed over, scheduled
        loop.call_at(decimal.Decimal(1), cb, arg).cancel()
    gc.collect()
    assert (sys.getrefcount(cb), sys.getrefcount(arg)) == before
    assert len(loop.wheel) == 0


def test_memory_stays_flat_over_many_calls(loop):
    def burst():
        for _ in range(5000):
            loop.call_later(5, cb, 1).cancel()
            loop.call_at(5.0, cb).cancel()
            try:
                loop.call_at(math.nan, cb)
            except ValueError:
                pass

    burst()
    tracemalloc.start()
    try:
        burst()
        m0 = tracemalloc.get_traced_memory()[0]
        for _ in range(4):
            burst()
        m1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert m1 - m0 < 64 * 1024  # 60,000 calls: a leak of one object each is MBs


def test_a_loop_is_freed_without_the_collector():
    # The loop's __dict__ holds the bound C methods; they hold the loop only
    # weakly, so dropping the loop frees it at once, as a stock loop is.
    gc.disable()
    try:
        lp = pwa.WheelEventLoop()
        lp.call_later(5, cb).cancel()
        lp.close()
        ref = weakref.ref(lp)
        del lp
        assert ref() is None
    finally:
        gc.enable()


def test_a_cycle_through_a_pending_timer_and_the_methods_is_collected():
    # wheel -> pending handle -> bound C method -> _LoopTimers -> wheel
    class Owner:
        pass

    owner = Owner()
    wheel = _core.ManualWheel()
    timers = _core._LoopTimers(wheel, owner, PY_LATER, PY_AT)
    wheel.call_later(100, timers.call_later, 1, cb)
    ref = weakref.ref(wheel)
    del wheel, timers
    gc.collect()
    assert ref() is None


# ---- the flags the C methods keep ------------------------------------------


def test_every_write_that_matters_switches_the_c_methods(loop):
    # Outside debug mode the C methods read no attribute per call: writes
    # (and deletions) of _closed, _debug, call_at and time tell them.
    at, later = loop.call_at, loop.call_later
    loop.time = lambda: 50.0  # call_later must call it, as the stock one does
    assert later(1, cb).when() == 51.0
    del loop.time
    t0 = loop.time()
    assert later(1, cb).when() >= t0 + 1
    mine = mock.Mock()
    loop.call_at = mine
    later(1, cb)
    assert mine.called
    del loop.call_at  # the class's Python call_at is what call_later reaches now
    assert later(1, cb).when() > 0 and loop.call_at.__func__ is PY_AT
    loop.call_at = at
    loop._debug = True
    assert outcome(at, 1, coro_fn)[0] is TypeError
    del loop._debug  # BaseEventLoop has no class attribute: the Python path decides
    assert outcome(later, 1, cb)[0] is AttributeError
    loop._debug = False
    assert outcome(at, 1, cb)[0] == "ok" and outcome(later, 1, cb)[0] == "ok"


def test_the_hook_is_only_where_the_c_methods_are():
    class Plain(pwa.WheelEventLoop):
        pass

    class OwnSetattr(pwa.WheelEventLoop):
        def time(self):
            return 0.0

        def __setattr__(self, name, value):
            object.__setattr__(self, name, value)

    assert Plain.__setattr__ is pwa.WheelEventLoop.__setattr__
    assert pwt.VirtualEventLoop.__setattr__ is object.__setattr__
    assert pwt.VirtualEventLoop.__delattr__ is object.__delattr__
    assert OwnSetattr.__setattr__ is OwnSetattr.__dict__["__setattr__"]
    lp = Plain()
    try:
        assert is_fast(lp.call_later)
        lp._closed = True
        assert outcome(lp.call_later, 1, cb) == (RuntimeError, "Event loop is closed")
        lp._closed = False
    finally:
        lp.close()


def test_a_bare_timers_object_hands_everything_over():
    # Until its loop says the state is plain, nothing is taken on directly.
    seen = []

    def py_at(loop, *args, **kw):
        seen.append(("at", args, kw))

    def py_later(loop, *args, **kw):
        seen.append(("later", args, kw))

    class Owner:
        pass

    owner = Owner()
    w = _core.ManualWheel()
    t = _core._LoopTimers(w, owner, py_later, py_at)
    t.call_at(1.0, cb)
    t.call_later(2.0, cb, context=None)
    assert seen == [("at", (1.0, cb), {}), ("later", (2.0, cb), {"context": None})]
    t._set_plain(True, True)
    assert t.call_at(1.0, cb).when() == 1.0 and len(seen) == 2
    t._set_plain(True, False)
    t.call_later(2.0, cb)
    assert len(seen) == 3
    w.close()
