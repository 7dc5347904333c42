"""Hostile input (docs/explanation/guarantees.md, "Hostile input"): NaN,
infinities, huge ints, Fractions, Decimals, bools, strings, objects whose
__float__ raises or whose __del__ cancels timers, advances or closes the
wheel, and the collector running at the worst moment: always the documented
exception or behaviour, never a crash.  A hypothesis fuzz checks every call
against the documented rules (docs/explanation/guarantees.md, "Bad input"), on a ManualWheel and a
threaded Wheel; wheels and handles refuse copy and pickle."""

import contextvars
import decimal
import fractions
import gc
import math
import time

import pytest
from helpers import IndexOnly, conserved, threads_now
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pywheel import ManualWheel, TimerHandle, Wheel

# ===========================================================================
# 6. Hostile input
# ===========================================================================


class Boom(Exception):
    pass


class FloatRaises:
    def __init__(self, exc):
        self.exc = exc

    def __float__(self):
        raise self.exc

    def __repr__(self):
        return f"FloatRaises({self.exc!r})"


class FloatReturns:
    def __init__(self, value):
        self.value = value

    def __float__(self):
        return self.value

    def __repr__(self):
        return f"FloatReturns({self.value!r})"


class IntSub(int):
    pass


class FloatSub(float):
    pass


class Hostile:
    """Runs an action against the wheel under test at a chosen moment."""

    def __init__(self, action, value=0.001):
        self.action = action
        self.value = value
        self.box = None  # set to the test's state before use

    def act(self):
        if self.box is not None:
            try:
                self.box.act(self.action)
            except Exception:  # noqa: BLE001 - hostile code may fail; the wheel must not
                pass

    def __repr__(self):
        return f"{type(self).__name__}({self.action!r})"


class FloatActs(Hostile):
    def __float__(self):
        self.act()
        return self.value


class DelActs(Hostile):
    def __del__(self):
        self.act()

    def __call__(self, *args):
        pass


ACTIONS = ["close", "cancel-all", "cancel-one", "schedule", "advance", "collect", "len-stats"]


class FuzzState:
    """What hostile objects can reach: the wheel and its handles."""

    def __init__(self, w):
        self.w = w
        self.handles = []

    def act(self, action):
        w = self.w
        if action == "close":
            w.close()
        elif action == "cancel-all":
            for h in list(self.handles):
                h.cancel()
        elif action == "cancel-one" and self.handles:
            self.handles[-1].cancel()
        elif action == "schedule":
            self.handles.append(w.call_later(0.001, lambda: None))
        elif action == "advance" and isinstance(w, ManualWheel):
            w.advance(0.001)
        elif action == "collect":
            gc.collect(0)
        elif action == "len-stats":
            len(w), w.stats(), repr(w)


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1, max_value=1),
    st.integers(-(2**200), 2**200),
    st.integers(-5, 5),
    st.booleans(),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.fractions(max_denominator=10**6),
    st.sampled_from([10**400, -(10**400), 10**309]).map(fractions.Fraction),
    st.integers(-(2**60), 2**60).map(IndexOnly),
    st.sampled_from([2**1100, -(2**1100)]).map(IndexOnly),
    st.integers(-(2**70), 2**70).map(IntSub),
    st.floats(allow_nan=True).map(FloatSub),
)
junk = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.complex_numbers(),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
    st.sampled_from([Boom("b"), ValueError("v"), KeyboardInterrupt(), MemoryError()]).map(
        FloatRaises
    ),
    st.sampled_from(["1", None, 1, 1 + 0j]).map(FloatReturns),
)
acting = st.builds(FloatActs, st.sampled_from(ACTIONS), st.sampled_from([0.0, 0.001, 1.0]))
values = st.one_of(numbers, junk, acting)


# The clock's range (docs/explanation/guarantees.md, "Clock"): |t| < 2**63 ns.
RANGE_NS = 2.0**63


def _in_range(s: float) -> bool:
    """Whether finite seconds s fit the clock, computed as the C code does."""
    return abs(s * 1e9) < RANGE_NS


def _seconds(v):
    """The float seconds a valid number stands for, or the exception class
    the documented rules demand ('Bad input' in docs/explanation/guarantees.md)."""
    if isinstance(v, FloatRaises):
        return type(v.exc)
    if isinstance(v, FloatReturns):
        return TypeError if not isinstance(v.value, float) else v.value
    if isinstance(v, FloatActs):
        return v.value
    if isinstance(v, IndexOnly):
        v = v.value  # then as an int
    if isinstance(v, bool | int):
        return float(v) if abs(v) <= 9223372036 else OverflowError
    if isinstance(v, fractions.Fraction):
        try:
            f = float(v)
        except OverflowError:
            return OverflowError
        return f if _in_range(f) else OverflowError
    if isinstance(v, float):
        if math.isnan(v):
            return ValueError
        return v if not math.isfinite(v) or _in_range(v) else OverflowError
    if isinstance(v, decimal.Decimal):
        if v.is_nan():
            return ValueError
        f = float(v)
        return f if not math.isfinite(f) or _in_range(f) else OverflowError
    return TypeError


def _expect_delay(v, now=0.0):
    """call_at(v) (now=0) or call_later(v) at wheel time now."""
    s = _seconds(v)
    if isinstance(s, type):
        return {s}
    if not math.isfinite(s):
        return {"ok"}
    t = abs(now + s) * 1e9
    if t < RANGE_NS * (1 - 1e-12):
        return {"ok"}
    return {OverflowError} if t > RANGE_NS * (1 + 1e-12) else {"ok", OverflowError}


def _expect_interval(v):
    s = _seconds(v)
    if isinstance(s, type):
        return {s}
    if not math.isfinite(s) or s <= 0:
        return {ValueError}
    if s < 1e-9:  # rounds to 0 ns
        return {ValueError, "ok"}
    return {"ok"}


def _outcome(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - classified by the caller
        return type(e), e
    except KeyboardInterrupt as e:  # a __float__ that raises it: passed through
        return type(e), e


contexts = st.one_of(
    st.none(),
    st.just("copy"),
    st.just("new"),
    st.sampled_from([{}, 1, "ctx", object()]),
)
callbacks = st.one_of(
    st.just("callable"),
    st.builds(DelActs, st.sampled_from(ACTIONS)),
    st.sampled_from([None, 42, "print", object()]),
)

fuzz_op = st.one_of(
    st.tuples(st.just("call_later"), values, callbacks, st.lists(values, max_size=2), contexts),
    st.tuples(st.just("call_at"), values, callbacks, st.lists(values, max_size=2), contexts),
    st.tuples(
        st.just("call_every"),
        st.tuples(values, st.one_of(st.none(), values)),
        callbacks,
        st.lists(st.one_of(values, st.builds(DelActs, st.sampled_from(ACTIONS))), max_size=2),
        contexts,
    ),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("advance"), values),
    st.tuples(st.just("run_due"), values),
    st.tuples(st.just("close"), st.one_of(st.none(), values)),
)


def _resolve_ctx(c):
    if c == "copy":
        return contextvars.copy_context()
    if c == "new":
        return contextvars.Context()
    return c


def _run_fuzz(w, ops):
    state = FuzzState(w)
    ran = []

    def arm(objs):
        for o in objs:
            if isinstance(o, Hostile):
                o.box = state

    def good(*args):
        ran.append(args)

    for op in ops:
        name = op[0]
        note(repr(op))
        if name in ("call_later", "call_at", "call_every"):
            _, v, cb, args, ctx = op
            callback = good if cb == "callable" else cb
            arm([*args, cb, *(v if name == "call_every" else (v,))])
            ctx_obj = _resolve_ctx(ctx)
            closed_before = w.closed
            s0, n0 = w.stats()["scheduled"], len(w)
            if name == "call_every":
                interval, first = v
                expect = _expect_interval(interval)
                if expect == {"ok"} and first is not None:
                    expect = _expect_delay(first, w.time())
                kw = {} if first is None else {"first": first}
                got, res = _outcome(w.call_every, interval, callback, *args, context=ctx_obj, **kw)
            else:
                expect = _expect_delay(v, w.time() if name == "call_later" else 0.0)
                got, res = _outcome(getattr(w, name), v, callback, *args, context=ctx_obj)
            # the argument checks come in a fixed order: callable, context, numbers
            if not callable(callback):
                expect = {TypeError}
            elif ctx_obj is not None and not isinstance(ctx_obj, contextvars.Context):
                expect = {TypeError} | (expect - {"ok"})
            if got == "ok":
                assert isinstance(res, TimerHandle)
                assert "ok" in expect, (op, expect)
                state.handles.append(res)
                if w.closed:  # a hostile object closed it after linking: cancelled
                    assert res.cancelled()
            else:
                allowed = expect
                if w.closed or closed_before:
                    allowed = (expect - {"ok"}) | {RuntimeError}
                assert got in allowed, (op, got, res, expect)
                numbers_given = v if name == "call_every" else (v,)
                if (
                    isinstance(w, ManualWheel)  # a threaded one's callbacks run meanwhile
                    and not w.closed
                    and not any(isinstance(o, Hostile) for o in [cb, *args, *numbers_given])
                ):
                    # a rejected call changes nothing (unless hostile code acted)
                    assert w.stats()["scheduled"] == s0 and len(w) == n0
        elif name == "cancel":
            if state.handles:
                h = state.handles[op[1] % len(state.handles)]
                before = h.cancelled()
                r = h.cancel()
                assert h.cancelled() is (before or r)
                assert not (before and r)
                assert h.cancel() is False  # idempotent
        elif name in ("advance", "run_due"):
            if isinstance(w, ManualWheel):
                arm([op[1]])
                t0 = w.time()
                got, res = _outcome(getattr(w, name), op[1])
                sec = _seconds(op[1])
                if isinstance(sec, type):
                    assert got is sec, (op, got, res)
                elif got == "ok":
                    assert isinstance(res, int) and res >= 0
                    if name == "run_due":
                        # times are whole nanoseconds, rounded to nearest
                        assert sec >= t0 - 1e-9 and w.time() == pytest.approx(sec, abs=1e-9)
                    else:
                        assert sec >= -1e-9
                elif got is OverflowError:  # the new time would leave the clock's range
                    target = sec + (t0 if name == "advance" else 0.0)
                    assert abs(target) * 1e9 >= RANGE_NS * (1 - 1e-12), op
                else:
                    # NaN, infinite, or a step backwards
                    assert got is ValueError, (op, got, res)
                    limit = 0.0 if name == "advance" else w.time()
                    assert not math.isfinite(sec) or sec < limit + 1e-9, op
                assert w.time() >= t0
        elif name == "close":
            arm([op[1]])
            got, res = _outcome(w.close, *([] if op[1] is None else [op[1]]))
            if got == "ok":
                assert isinstance(res, list) and all(h.cancelled() for h in res)
                assert w.closed
        # invariants after every step (a threaded wheel may fire between two
        # calls: there only what one stats() call says is compared)
        if isinstance(w, ManualWheel):
            assert len(w) == w.stats()["pending"]
        assert conserved(w), w.stats()
        if w.closed:
            assert len(w) == 0
    return state


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(ops=st.lists(fuzz_op, max_size=25), tick=st.sampled_from([0.001, 0.01, 1e-6]))
def test_hostile_input_fuzz_manual(ops, tick):
    w = ManualWheel(tick=tick)
    state = _run_fuzz(w, ops)
    # drain: every handle not cancelled and due runs; the rest are returned by close()
    if not w.closed:
        try:  # a repeating timer runs at most every tick: bound the runs to 10,000
            w.advance(10_000 * tick)
        except RuntimeError:
            pass
        except OverflowError:  # time is at the end of the clock's range already
            pass
    left = w.close()
    assert all(h.cancelled() for h in left)
    for h in state.handles:
        assert h.cancel() is False
    assert conserved(w) and len(w) == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(fuzz_op, max_size=15))
def test_hostile_input_fuzz_threaded(ops):
    w = Wheel()
    try:
        state = _run_fuzz(w, ops)
        time.sleep(0.003)
    finally:
        left = w.close(timeout=10)
    assert all(h.cancelled() for h in left)
    assert conserved(w) and len(w) == 0
    del state


@settings(max_examples=150, deadline=None)
@given(tick=values, start=st.one_of(st.none(), values))
def test_hostile_wheel_construction(tick, start):
    s = _seconds(tick)
    kw = {} if start is None else {"start": start}
    got, w = _outcome(ManualWheel, tick, **kw)
    if got != "ok":
        allowed = {s} if isinstance(s, type) else {ValueError}
        if start is not None:
            s2 = _seconds(start)
            allowed |= {s2} if isinstance(s2, type) else {ValueError}
            if s2 is OverflowError:  # refused as out of range, maybe before tick is read
                allowed |= {ValueError}
        assert got in allowed, (tick, start, got, w)
        return
    assert isinstance(s, float) and math.isfinite(s) and s > 0
    w.call_later(1, print)
    w.advance(0)
    w.close()


def test_hostile_exception_handler_inputs(unraisable, pywheel_log):
    w = ManualWheel()
    for bad in (42, "handler", object()):
        with pytest.raises(TypeError):
            w.set_exception_handler(bad)
    for bad in ([], None, "x", 1):
        with pytest.raises(TypeError):
            w.call_exception_handler(bad)
        with pytest.raises(TypeError):
            w.default_exception_handler(bad)

    class NastyRepr:
        def __repr__(self):
            raise RuntimeError("repr")

    class Mutator:
        def __init__(self, d):
            self.d = d

        def __repr__(self):
            self.d.clear()  # mutates the dict being formatted
            self.d.update({i: i for i in range(50)})
            return "mutator"

    ctx = {"message": "m", 1: 2, NastyRepr(): "k", "v": NastyRepr(), "exception": ValueError()}
    w.call_exception_handler(ctx)  # to the default handler: fails to format, goes unraisable
    mut = {"message": "m"}
    mut["x"] = Mutator(mut)
    w.call_exception_handler(mut)
    w.call_exception_handler({"exception": "not an exception", "message": 3})
    w.call_exception_handler({})
    assert len(unraisable) + len(pywheel_log) == 4


def test_gc_during_schedule_closing_the_wheel():
    # A collection started by the allocations inside call_later/call_every runs
    # a __del__ that closes the wheel: the call must not link a handle into a
    # closed wheel.  Nothing between arming the collector and the call
    # allocates, so the collection runs inside the call.
    for method in ("call_later", "call_every"):
        w = ManualWheel()
        call = getattr(w, method)
        phase = ["arming"]
        seen = []
        gc.collect()
        gc.disable()
        old = gc.get_threshold()
        try:

            class Closer:
                def __del__(self, w=w, phase=phase, seen=seen):
                    seen.append(phase[0])
                    w.close()

            for _ in range(3):
                c = Closer()
                c.self = c  # cyclic garbage
                del c
            gc.set_threshold(1)
            res = None
            gc.enable()
            phase[0] = "calling"
            try:
                res = call(1, print, "arg")
            except RuntimeError:
                got = RuntimeError
            else:
                got = "ok"
        finally:
            gc.set_threshold(*old)
            gc.enable()
        gc.collect()
        assert seen and seen[0] == "calling", seen
        assert w.closed
        if got == "ok":
            assert res.cancelled(), "a handle was linked into a closed wheel"
        assert len(w) == 0 and conserved(w)
        assert w.stats()["pending"] == 0


@pytest.mark.parametrize("where", ["arg", "callback"])
@pytest.mark.parametrize("end", ["fire", "cancel", "close"])
@pytest.mark.parametrize("action", ["close", "cancel-all", "schedule", "advance"])
def test_del_that_acts_on_the_wheel_when_released(where, end, action):
    w = ManualWheel()
    state = FuzzState(w)
    others = [w.call_later(0.002 * k, print, k) for k in range(1, 4)]
    state.handles.extend(others)
    obj = DelActs(action)
    obj.box = state
    h = w.call_later(0.001, obj, "x") if where == "callback" else w.call_later(0.001, print, obj)
    state.handles.append(h)
    del obj
    if end == "fire":
        w.advance(0.001)
    elif end == "cancel":
        assert h.cancel() is True
    else:
        w.close()
    assert conserved(w)
    assert len(w) == w.stats()["pending"]
    w.advance(1) if not w.closed else None
    w.close()
    assert all(x.cancelled() or x.cancel() is False for x in state.handles)
    assert conserved(w)


def test_del_advancing_the_wheel_after_the_last_callback_cannot_move_time_backwards():
    # The last callback of a batch is released after it ran; its __del__
    # advancing the same ManualWheel must be refused, or keep time monotonic.
    w = ManualWheel()
    seen = []

    class Advancer:
        def __del__(self):
            try:
                w.advance(5)
            except RuntimeError:
                seen.append("refused")

        def __call__(self):
            pass

    w.call_later(0.001, Advancer())
    w.advance(1)
    assert w.time() >= 1.0
    t = w.time()
    w.call_later(0.5, lambda: seen.append(w.time()))
    w.advance(1)
    assert w.time() >= t
    assert seen[-1] >= t + 0.5


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_wheels_and_handles_refuse_copy_and_pickle(how):
    import copy
    import pickle

    fn = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": pickle.dumps}[how]
    threads = threads_now()
    with Wheel() as w:
        m = ManualWheel()
        for obj in (w, m, w.call_later(10, print), m.call_every(1, print)):
            with pytest.raises(TypeError):
                fn(obj)
        # no second wheel thread appeared (where threads are counted)
        assert threads is None or threads_now() <= threads + 1
        m.close()
