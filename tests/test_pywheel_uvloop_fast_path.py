"""pywheel.uvloop.Loop's call_later and call_at in C (outside debug mode)
keep every behaviour of the Python methods they stand in for.

The C methods (``pywheel._core._LoopTimers`` made with uvloop's clock and
the loop's ``_arm``) take the common call themselves and hand everything
else to ``pywheel.uvloop.Loop.call_later`` / ``call_at``.  The oracles: the
Python methods on the same loop (errors equal to the message), and uvloop
itself (the error's type, where the two do not differ on purpose)."""

from __future__ import annotations

import asyncio
import contextvars
import decimal
import fractions
import gc
import math
import subprocess
import sys
import weakref

import pytest
from helpers import child_env, is_fast, outcome_of

try:
    import uvloop

    from pywheel import _core
    from pywheel import uvloop as pwu
except ImportError:
    uvloop = pwu = None

pytestmark = pytest.mark.skipif(
    uvloop is None, reason="uvloop is not installed (pip install 'pywheel[uvloop]')"
)

PY_LATER = pwu.Loop.call_later if pwu else None
PY_AT = pwu.Loop.call_at if pwu else None


def cb(*args):
    pass


@pytest.fixture
def loop():
    lp = pwu.Loop()
    yield lp
    lp.close()


# ('ok',) or (exception type, message); a handle made is cancelled.
outcome = outcome_of(when=False)


# ---- which methods run ---------------------------------------------------


def test_the_methods_are_the_c_ones_outside_debug_mode(loop):
    assert is_fast(loop.call_later) and is_fast(loop.call_at)
    assert loop.call_later.__self__ is loop.call_at.__self__ is loop._timers
    h = loop.call_later(10, cb)
    assert type(h) is _core.TimerHandle and len(loop.wheel) == 1
    h.cancel()


def test_debug_mode_switches_to_the_python_methods_and_back(loop):
    loop.set_debug(True)
    assert loop.call_later.__func__ is PY_LATER and loop.call_at.__func__ is PY_AT
    h = loop.call_later(10, cb)
    assert isinstance(h, asyncio.TimerHandle) and h._source_traceback
    h.cancel()
    loop.set_debug(False)
    assert is_fast(loop.call_later) and is_fast(loop.call_at)
    assert type(loop.call_later(10, cb)) is _core.TimerHandle


def test_a_c_method_kept_from_before_debug_mode_takes_the_debug_path(loop):
    later, at = loop.call_later, loop.call_at
    loop.set_debug(True)
    h = later(10, cb)
    k = at(loop.time() + 10, cb)
    assert isinstance(h, asyncio.TimerHandle) and isinstance(k, asyncio.TimerHandle)
    h.cancel()
    k.cancel()

    async def coro():
        pass

    with pytest.raises(TypeError, match="coroutines cannot be used"):
        later(1, coro)


def test_a_loop_made_in_debug_mode_starts_on_the_python_methods():
    code = (
        "from pywheel import uvloop as pwu\n"
        "lp = pwu.Loop()\n"
        "assert lp.get_debug()\n"
        "assert lp.call_later.__func__ is pwu.Loop.call_later\n"
        "assert lp.call_at.__func__ is pwu.Loop.call_at\n"
        "lp.close()\n"
        "print('ok')\n"
    )
    env = child_env()
    env["PYTHONASYNCIODEBUG"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_run_debug_true_runs_the_python_methods():
    async def main():
        lp = asyncio.get_running_loop()
        return getattr(lp.call_later, "__func__", None) is PY_LATER, is_fast(lp.call_at)

    assert pwu.run(main(), debug=True) == (True, False)
    assert pwu.run(main()) == (False, True)


def test_a_closed_loop_is_back_on_the_python_methods_and_says_closed():
    lp = pwu.Loop()
    later, at = lp.call_later, lp.call_at
    lp.close()
    assert lp.call_later.__func__ is PY_LATER and lp.call_at.__func__ is PY_AT
    for fn in (later, at, lp.call_later, lp.call_at):
        with pytest.raises(RuntimeError, match="^Event loop is closed$"):
            fn(1, cb)


def test_a_c_method_outliving_its_loop_says_closed():
    lp = pwu.Loop()
    later = lp.call_later
    lp.close()
    ref = weakref.ref(lp)
    del lp
    gc.collect()
    assert ref() is None
    with pytest.raises(RuntimeError, match="^Event loop is closed$"):
        later(1, cb)


def test_a_subclass_with_its_own_call_later_keeps_it():
    seen = []

    class Mine(pwu.Loop):
        def call_later(self, delay, callback, *args, context=None):
            seen.append(delay)
            return super().call_later(delay, callback, *args, context=context)

    lp = Mine()
    try:
        assert not is_fast(lp.call_later) and not is_fast(lp.call_at)
        lp.run_until_complete(asyncio.sleep(0.001))
        assert seen == [0.001]
    finally:
        lp.close()


def test_a_method_set_on_the_instance_is_left_alone(loop):
    mine = lambda *a, **k: "mine"  # noqa: E731
    loop.call_at = mine
    loop.set_debug(True)
    loop.set_debug(False)
    assert loop.call_at is mine and is_fast(loop.call_later)


# ---- errors: the Python methods', and uvloop's types --------------------------------

BAD = [
    ("call_later", (None, cb), {}),
    ("call_later", (math.nan, cb), {}),
    ("call_later", (math.inf, cb), {}),
    ("call_later", (-math.inf, cb), {}),
    ("call_later", ("1", cb), {}),
    ("call_later", (decimal.Decimal(1), cb), {}),
    ("call_later", (fractions.Fraction(1, 2), cb), {}),
    ("call_later", (10**400, cb), {}),
    ("call_later", (True, cb), {}),
    ("call_later", (1, 5), {}),
    ("call_later", (1, cb), {"foo": 1}),
    ("call_later", (1, cb), {"context": 5}),
    ("call_later", (1,), {}),
    ("call_later", (), {}),
    ("call_at", (None, cb), {}),
    ("call_at", (math.nan, cb), {}),
    ("call_at", ("1", cb), {}),
    ("call_at", (10**400, cb), {}),
    ("call_at", (-(10**400), cb), {}),
    ("call_at", (1e300, cb), {}),
    ("call_at", (decimal.Decimal(5), cb), {}),
    ("call_at", (1, cb), {"foo": 1}),
    ("call_at", (1, cb), {"context": 5}),
    ("call_at", (1, "x"), {}),
]

# Where pywheel.uvloop differs from uvloop on purpose (docs/explanation/
# asyncio-differences.md, "Differences from uvloop"): a callback
# or context refused when scheduled, not when the timer runs; numbers the
# wheel's clock takes as asyncio's loops do (call_at: when - time() is not
# taken first; call_later: time() + delay is).
DIFFERS = {
    ("call_later", "Decimal"),
    ("call_later", "int_huge"),
    ("call_later", "not_callable"),
    ("call_later", "context"),
    ("call_at", "int_huge"),
    ("call_at", "Decimal"),
    ("call_at", "not_callable"),
    ("call_at", "context"),
}


def _kind(args, kw):
    if "context" in kw:
        return "context"
    if len(args) > 1 and not callable(args[1]):
        return "not_callable"
    if args and isinstance(args[0], decimal.Decimal):
        return "Decimal"
    if args and type(args[0]) is int and abs(args[0]) > 2**64:
        return "int_huge"
    return repr(args[:1])


@pytest.mark.parametrize(("name", "args", "kw"), BAD, ids=lambda v: repr(v)[:30])
def test_errors_are_the_python_methods_and_uvloops(loop, name, args, kw):
    fast = outcome(getattr(loop, name), *args, **kw)
    assert is_fast(getattr(loop, name))
    slow = outcome(getattr(pwu.Loop, name).__get__(loop), *args, **kw)
    assert fast == slow
    uv = uvloop.Loop()
    try:
        theirs = outcome(getattr(uv, name), *args, **kw)
    finally:
        uv.close()
    if (name, _kind(args, kw)) not in DIFFERS:
        assert fast[0] == theirs[0], (fast, theirs)
    assert len(loop.wheel) == 0


def test_a_wheel_closed_under_an_open_loop_raises_as_the_python_path(loop):
    loop.wheel.close()
    fast = outcome(loop.call_later, 1, cb)
    slow = outcome(PY_LATER.__get__(loop), 1, cb)
    assert fast == slow and fast[0] is RuntimeError
    assert outcome(loop.call_at, 1, cb) == outcome(PY_AT.__get__(loop), 1, cb)


# ---- what the C path does: deadlines, the libuv timer ------------------------------


def test_deadline_is_uvloops_time_plus_delay(loop):
    before = loop.time()
    h = loop.call_later(0.25, cb)
    after = loop.time()
    assert before + 0.25 <= h.when() <= after + 0.25
    assert loop.call_at(12.5, cb).when() == 12.5
    assert loop.call_at(7, cb).when() == 7.0


def test_the_c_path_arms_the_libuv_timer_only_for_an_earlier_deadline(loop):
    timers = loop._timers
    assert timers.arm_below == math.inf and loop._uv_timer is None
    loop.call_later(5, cb)
    armed = loop._uv_timer
    assert armed is not None and timers.arm_below == loop._uv_fires < math.inf
    for k in range(50):
        loop.call_later(6 + k, cb)
        loop.call_at(loop.time() + 7 + k, cb)
    assert loop._uv_timer is armed
    loop.call_at(loop.time() + 1, cb)
    assert loop._uv_timer is not armed and armed.cancelled()
    loop.call_later(math.inf, cb)  # never runs: nothing to arm
    loop.call_at(1e300, cb)
    assert timers.arm_below == loop._uv_fires


def test_the_c_path_runs_timers_in_order_never_early(loop):
    # Each when() is the delay after a clock reading taken during the call
    # (uvloop's time() can move on a millisecond between two reads, so the
    # five deadlines may tie or cross): the timers run by when(), ties in the
    # order they were scheduled, none before loop.time() reaches its when().
    ran, whens, floors = [], {}, {}

    def note(key):
        ran.append((key, loop.time() >= whens[key]))

    async def main():
        for i in range(5):
            delay = 0.001 * (5 - i)
            floors[i] = loop.time() + delay
            whens[i] = loop.call_later(delay, note, i).when()
        w = loop.time() + 0.003
        floors["at"] = w
        whens["at"] = loop.call_at(w, note, "at").when()
        # A call_at whose deadline had passed (a 3 ms stall here) is a soon
        # timer, run where uvloop runs its call_soon: not in deadline order.
        maybe_soon = loop.time() >= w
        await asyncio.sleep(0.02)
        return maybe_soon

    maybe_soon = loop.run_until_complete(main())
    assert all(whens[k] >= floors[k] - 1e-9 for k in whens), (whens, floors)
    assert all(ok for _, ok in ran), ran
    order = [k for k, _ in ran]
    seq = {k: n for n, k in enumerate([0, 1, 2, 3, 4, "at"])}
    assert sorted(order, key=seq.get) == [0, 1, 2, 3, 4, "at"]
    if maybe_soon:
        order.remove("at")
    assert order == sorted(order, key=lambda k: (whens[k], seq[k])), (order, whens)


# ---- the object itself: its clock and arm hooks --------------------------------------


class Owner:
    pass


def make(time_fn, arm_fn):
    wheel = _core.ManualWheel(0.001)
    owner = Owner()
    calls = []

    def py_later(self, *a, **k):
        calls.append(("later", a, k))
        return "python"

    def py_at(self, *a, **k):
        calls.append(("at", a, k))
        return "python"

    t = _core._LoopTimers(wheel, owner, py_later, py_at, time_fn, arm_fn)
    t._set_plain(True, True)
    return wheel, owner, t, calls


def test_arm_is_called_only_before_arm_below_with_the_python_paths_when():
    armed = []
    wheel, owner, t, calls = make(lambda lp: 100.0, lambda lp, when: armed.append((lp, when)))
    t.call_later(5, cb)
    assert armed == [(owner, 105.0)]
    t.arm_below = 105.0
    t.call_later(5, cb)
    t.call_at(106, cb)
    t.call_later(math.inf, cb)
    t.call_at(1e300, cb)  # beyond the clock: never runs, nothing to arm
    assert len(armed) == 1
    t.call_at(104, cb)
    t.call_at(-1e300, cb)  # far past: runs now, as when() == -inf
    assert armed[1:] == [(owner, 104.0), (owner, -math.inf)]
    assert calls == [] and len(wheel) == 7
    with pytest.raises(TypeError):
        t.arm_below = "x"
    with pytest.raises(AttributeError):
        del t.arm_below


def test_an_arm_that_raises_leaves_the_timer_scheduled_as_the_python_path():
    class Boom(Exception):
        pass

    def arm(lp, when):
        raise Boom

    wheel, owner, t, calls = make(lambda lp: 0.0, arm)
    with pytest.raises(Boom):
        t.call_later(1, cb)
    with pytest.raises(Boom):
        t.call_at(2, cb)
    assert len(wheel) == 2  # as Loop.call_at: scheduled, then _arm raised


def test_the_clock_is_read_once_and_its_error_is_the_callers():
    reads = []

    def clock(lp):
        reads.append(lp)
        if len(reads) == 2:
            raise ZeroDivisionError
        return 3.0 if len(reads) != 3 else 3  # an int: not uvloop's; handed over

    wheel, owner, t, calls = make(clock, None)
    assert t.call_later(1, cb).when() == 4.0 and reads == [owner]
    with pytest.raises(ZeroDivisionError):
        t.call_later(1, cb)
    assert t.call_later(1, cb) == "python" and calls == [("later", (1, cb), {})]
    t.call_at(9, cb)
    assert len(reads) == 3  # call_at never reads the clock
    assert len(wheel) == 2


def test_the_hooks_must_be_callables():
    wheel = _core.ManualWheel(0.001)
    with pytest.raises(TypeError):
        _core._LoopTimers(wheel, Owner(), cb, cb, 5)
    with pytest.raises(TypeError):
        _core._LoopTimers(wheel, Owner(), cb, cb, None, 5)
    assert _core._LoopTimers(wheel, Owner(), cb, cb, None, None).arm_below == math.inf


def test_context_goes_to_the_timer(loop):
    var = contextvars.ContextVar("v")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "given")
    seen = []
    loop.call_later(0.001, lambda: seen.append(var.get("none")), context=ctx)
    loop.call_at(loop.time() + 0.001, lambda: seen.append(var.get("none")))
    loop.run_until_complete(asyncio.sleep(0.02))
    assert seen == ["given", "none"]


def test_the_c_methods_hold_the_loop_weakly(loop):
    """loop -> its bound C methods -> _LoopTimers holds the loop by a weak
    reference only, so binding them adds no cycle through the loop."""
    timers = loop._timers
    refs = gc.get_referents(timers)
    assert loop not in refs and loop.wheel in refs
    assert any(type(r) is weakref.ref and r() is loop for r in refs)
