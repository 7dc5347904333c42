"""pywheel.rloop: rloop's loop with its timers on a pywheel wheel.

The reference is rloop itself: the same program on rloop.RLoop and on
pywheel.rloop.Loop gives the same trace.  The promises: never early by
loop.time(), exact-deadline order, after what was ready, a deadline already
reached where rloop's call_soon would put it, cancel/close/errors as rloop,
one rloop timer however many are pending, no reference kept.  Without rloop
(PyPI has no wheel for this Python or platform) only the import tests run."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import math
import random
import subprocess
import sys
import time
import weakref

import pytest
from helpers import child_env

try:
    import rloop

    from pywheel import rloop as pwr
except ImportError:
    rloop = pwr = None

needs_rloop = pytest.mark.skipif(
    rloop is None, reason="rloop is not installed (pip install 'pywheel[rloop]')"
)

LOOPS = {} if rloop is None else {"rloop": rloop.new_event_loop, "pywheel.rloop": pwr.Loop}
NAMES = ["rloop", "pywheel.rloop"]


def on(factory, coro_fn):
    loop = factory()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


def both(program):
    """program(loop) on each loop, closed after; {name: result}."""
    out = {}
    for name, factory in LOOPS.items():
        loop = factory()
        try:
            out[name] = program(loop)
        finally:
            loop.close()
    return out


# ---- import: optional, and never by `import pywheel` ------------------------


def test_import_pywheel_never_imports_rloop():
    code = (
        "import sys, pywheel, pywheel.asyncio, pywheel.testing\n"
        "assert 'rloop' not in sys.modules, 'rloop imported'\n"
        "assert 'pywheel.rloop' not in sys.modules\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert proc.returncode == 0, proc.stderr


def test_without_rloop_the_import_error_says_how_to_install():
    code = (
        "import sys\n"
        "sys.modules['rloop'] = None  # as if not installed\n"
        "try:\n"
        "    from pywheel import rloop\n"
        "except ImportError as e:\n"
        "    print('MSG', e.name, e)\n"
        "else:\n"
        "    raise SystemExit('imported')\n"
        "import pywheel, pywheel.asyncio  # still fine\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert "MSG pywheel.rloop" in proc.stdout, proc.stdout
    assert "pip install 'pywheel[rloop]'" in proc.stdout, proc.stdout


# ---- names: the whole change is the import ------------------------------------


@needs_rloop
def test_names_mirror_rloop():
    assert issubclass(pwr.Loop, rloop.RLoop)
    assert set(pwr.__all__) == {"Loop", "new_event_loop", "run"}
    loop = pwr.new_event_loop()
    assert type(loop) is pwr.Loop
    loop.close()

    async def main():
        return type(asyncio.get_running_loop()), await asyncio.sleep(0.001, "done")

    assert pwr.run(main()) == (pwr.Loop, "done")
    assert pwr.run(main(), debug=True) == (pwr.Loop, "done")


@needs_rloop
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_policy_where_asyncio_has_policies():
    if not hasattr(asyncio, "DefaultEventLoopPolicy"):
        with pytest.raises(AttributeError):
            pwr.EventLoopPolicy  # noqa: B018
        return
    policy_cls = pwr.EventLoopPolicy
    assert policy_cls is pwr.EventLoopPolicy  # made once
    assert issubclass(policy_cls, rloop.EventLoopPolicy)
    loop = policy_cls().new_event_loop()
    assert type(loop) is pwr.Loop
    loop.close()
    with pytest.raises(AttributeError):
        pwr.install  # noqa: B018  (rloop has none)


# ---- the same program, the same trace -----------------------------------------


def _trace_program(loop):
    """Ready callbacks, timers ahead, due ones, cancels, timers scheduled by
    timers and by ready callbacks: the order they run in."""
    trace = []
    add = trace.append
    t0 = loop.time()

    def timer(name):
        add(name)
        if name == "t10":
            loop.call_soon(add, "soon-from-t10")
            loop.call_later(0, add, "zero-from-t10")
            loop.call_later(0.004, add, "t10+4")
            loop.call_at(loop.time() - 1, add, "past-from-t10")

    loop.call_soon(add, "s1")
    loop.call_later(0.010, timer, "t10")
    loop.call_later(0.020, timer, "t20")
    loop.call_at(t0 + 0.030, timer, "t30")
    loop.call_later(0, add, "zero")
    loop.call_later(-1, add, "negative")
    loop.call_at(t0 - 5, add, "past")
    loop.call_soon(add, "s2")
    loop.call_later(0.025, add, "cancelled").cancel()
    loop.call_later(0, lambda: add("zero-cancelled")).cancel()  # (see below)
    c = loop.call_later(0.005, add, "cancelled-by-t3")
    loop.call_later(0.003, c.cancel)
    loop.call_later(0.045, loop.stop)
    loop.run_forever()
    return trace


@needs_rloop
def test_trace_is_rloops():
    traces = both(_trace_program)
    assert traces["pywheel.rloop"] == traces["rloop"]
    assert traces["rloop"][:5] == ["s1", "zero", "negative", "past", "s2"]
    assert "t10+4" in traces["rloop"] and "cancelled" not in traces["rloop"]


@needs_rloop
def test_cancelling_a_zero_delay_timer_with_one_argument_works_unlike_rloop():
    """rloop 0.5's call_soon handle for a callback with exactly one argument
    (its CBHandle1) ignores cancel(): the callback runs.  call_later(0, f, x)
    is such a call_soon there.  pywheel.rloop does not copy that bug: its
    handle is cancelled as asyncio's is.  This test says rloop still has it."""

    def program(loop):
        ran = []
        loop.call_later(0, ran.append, "one arg").cancel()
        loop.call_later(0, lambda: ran.append("no arg")).cancel()
        loop.run_until_complete(asyncio.sleep(0.005))
        return ran

    out = both(program)
    assert out["rloop"] == ["one arg"]
    assert out["pywheel.rloop"] == []


async def _sleep_timeout_wait_for_program():
    loop = asyncio.get_running_loop()
    out = {}

    async def one(key, coro):
        try:
            out[key] = await coro
        except BaseException as exc:  # noqa: BLE001 - the outcome is the point
            out[key] = type(exc).__name__

    async def slow(d, v):
        await asyncio.sleep(d)
        return v

    async def under_timeout(d, limit):
        async with asyncio.timeout(limit):
            return await slow(d, "in time")

    fut = loop.create_future()
    loop.call_later(0.002, fut.set_result, "fut")
    await asyncio.gather(
        one("sleep", asyncio.sleep(0.003, "slept")),
        one("sleep0", asyncio.sleep(0, "zero")),
        one("wait_for ok", asyncio.wait_for(slow(0.002, "ok"), 0.05)),
        one("wait_for late", asyncio.wait_for(slow(0.05, "late"), 0.005)),
        one("wait_for fut", asyncio.wait_for(fut, 1)),
        one("timeout ok", under_timeout(0.002, 0.05)),
        one("timeout late", under_timeout(0.05, 0.005)),
        one("timeout past", under_timeout(0.001, -1)),
        one("timeout_at", under_timeout(0.05, 0)),
    )
    return out


@needs_rloop
def test_sleep_timeout_wait_for_outcomes_are_rloops():
    results = {name: on(f, _sleep_timeout_wait_for_program) for name, f in LOOPS.items()}
    assert results["pywheel.rloop"] == results["rloop"]
    assert len(results["rloop"]) == 9


@needs_rloop
def test_due_timer_runs_after_what_was_ready_as_on_rloop():
    def program(loop):
        trace = []

        def first():
            loop.call_later(0.001, trace.append, "timer")
            time.sleep(0.005)  # the timer is due before the loop gets back
            loop.call_soon(trace.append, "ready")

        loop.call_soon(first)
        loop.call_later(0.05, loop.stop)
        loop.run_forever()
        return trace

    assert both(program) == {"rloop": ["ready", "timer"], "pywheel.rloop": ["ready", "timer"]}


@needs_rloop
def test_deadline_reached_runs_where_rloops_call_soon_would():
    def program(loop):
        trace = []

        def first():
            loop.call_soon(trace.append, "a")
            loop.call_at(loop.time() - 0.5, trace.append, "past")
            loop.call_later(0, trace.append, "zero")
            loop.call_soon(trace.append, "b")
            loop.call_later(-3, trace.append, "negative")
            loop.call_later(-math.inf, trace.append, "-inf")

        loop.call_soon(first)
        loop.call_later(0.01, loop.stop)
        loop.run_forever()
        return trace

    traces = both(program)
    assert (
        traces["pywheel.rloop"] == traces["rloop"] == ["a", "past", "zero", "b", "negative", "-inf"]
    )


# ---- never early, exact-deadline order, one rloop timer ------------------------


@needs_rloop
def test_never_early_by_loop_time():
    rng = random.Random(7)
    loop = pwr.Loop()
    late = []

    def check(handle_box, lo):
        now = loop.time()
        assert handle_box[0].when() >= lo - 1e-12
        late.append(now - handle_box[0].when())

    async def main():
        for _ in range(20):
            for _ in range(25):
                delay = rng.uniform(-0.002, 0.012)
                when = loop.time() + delay
                box = []
                box.append(loop.call_at(when, check, box, when))
                box2 = []
                lo = loop.time() + delay
                box2.append(loop.call_later(delay, check, box2, lo))
            await asyncio.sleep(0.013)
        await asyncio.sleep(0.02)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(late) == 1000
    assert min(late) >= 0, min(late)


@needs_rloop
def test_timers_run_by_exact_deadline():
    for _attempt in range(5):
        loop = pwr.Loop()
        ran = []

        async def main(loop=loop, ran=ran):
            base = loop.time() + 0.02
            offsets = [k * 0.00003 for k in range(10)] * 2  # ties too, FIFO among them
            order = list(range(len(offsets)))
            random.Random(3).shuffle(order)
            for i in order:
                loop.call_at(base + offsets[i], ran.append, (offsets[i], order.index(i)))
            ahead = loop.time() < base
            await asyncio.sleep(0.04)
            return ahead

        try:
            ahead = loop.run_until_complete(main())
        finally:
            loop.close()
        if ahead:
            break
    assert ran == sorted(ran)
    assert len(ran) == 20


@needs_rloop
def test_many_pending_timers_one_rloop_timer():
    loop = pwr.Loop()
    try:
        handles = [loop.call_later(1 + (i % 97) * 0.01, print) for i in range(10_000)]
        assert len(loop.wheel) == 10_000
        first = loop._rl_timer
        assert first is not None and loop._armed == min(h.when() for h in handles)
        for _ in range(5000):
            loop.call_later(2, print)  # later deadlines: no re-arm
        assert loop._rl_timer is first
        earlier = loop.call_later(0.5, print)
        assert loop._rl_timer is not first and first.cancelled()
        assert loop._armed == earlier.when()
        for h in handles:
            h.cancel()
        earlier.cancel()
    finally:
        loop.close()


@needs_rloop
def test_cancel_the_armed_timer_and_inside_a_batch():
    def program(loop):
        ran = []
        a = loop.call_later(0.002, ran.append, "a")
        b = loop.call_later(0.004, ran.append, "b")

        def cancel_b():
            b.cancel()
            ran.append(("b cancelled", b.cancelled()))

        loop.call_later(0.003, cancel_b)
        a.cancel()
        loop.call_later(0.004, ran.append, "c")
        loop.run_until_complete(asyncio.sleep(0.02))
        return ran, a.cancelled(), b.cancelled()

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"] == ([("b cancelled", True), "c"], True, True)


@needs_rloop
def test_handles_when_is_the_deadline_asked_for():
    loop = pwr.Loop()
    try:
        when = loop.time() + 1.2345678
        h = loop.call_at(when, print)
        assert h.when() == when
        now = loop.time()
        h2 = loop.call_later(3.0, print)
        assert now + 3.0 <= h2.when() <= loop.time() + 3.0
        assert not h.cancelled()
        h.cancel()
        assert h.cancelled()
        h.cancel()  # twice: nothing
        assert h.get_context() is not None
    finally:
        loop.close()


@needs_rloop
def test_task_cancel_cancels_its_sleep_timer():
    loop = pwr.Loop()

    async def main():
        t = asyncio.ensure_future(asyncio.sleep(100))
        await asyncio.sleep(0)
        assert len(loop.wheel) == 1
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return len(loop.wheel)

    try:
        assert loop.run_until_complete(main()) == 0
    finally:
        loop.close()


# ---- odd deadlines and arguments: rloop's treatment ------------------------------


def _odd_program(values, at):
    def program(loop):
        ran = []
        for v in values:
            try:
                if at:
                    loop.call_at(v, ran.append, repr(v)[:20])
                else:
                    loop.call_later(v, ran.append, repr(v)[:20])
            except Exception as exc:  # noqa: BLE001 - the error is the outcome
                ran.append(f"{type(exc).__name__}: {exc}")
        loop.run_until_complete(asyncio.sleep(0.02))
        return sorted(ran)

    return program


@needs_rloop
@pytest.mark.parametrize("at", [False, True], ids=["call_later", "call_at"])
def test_nan_and_huge_deadlines_as_rloop(at):
    values = [math.nan, 1e10, 1e30, 2**70, -1e300, -(2**70)]
    if not at:  # (call_at: see the test below)
        values += [10**400, -(10**400)]
    out = both(_odd_program(values, at))
    assert out["pywheel.rloop"] == out["rloop"]
    assert "nan" in out["rloop"] and "1e+30" not in out["rloop"]


@needs_rloop
def test_positive_infinity_and_huge_ints_differ_from_rloop_known():
    """rloop 0.5 runs a timer due at +inf (or after ~3.4e32 s) at once (its
    microsecond count saturates); pywheel.rloop's C fast path, as asyncio,
    never runs it.  Documented in the module; this test says it still is."""
    out = both(_odd_program([math.inf, 1e300], at=False))
    assert out["rloop"] == ["1e+300", "inf"]
    assert out["pywheel.rloop"] == []
    # Likewise call_at with an int beyond a float: rloop's `when - time()`
    # raises OverflowError; the fast path takes it as never / long past.
    out = both(_odd_program([10**400, -(10**400)], at=True))
    assert out["rloop"] == ["OverflowError: int too large to convert to float"] * 2
    assert out["pywheel.rloop"] == ["-1000000000000000000"]


@needs_rloop
@pytest.mark.parametrize("name", NAMES)
def test_bad_arguments_as_rloop(name):
    loop = LOOPS[name]()
    try:
        errors = []
        for args in [(None, print), ("1", print), (1j, print)]:
            for meth in (loop.call_later, loop.call_at):
                with pytest.raises(TypeError) as e:
                    meth(*args)
                errors.append(str(e.value))
        with pytest.raises(TypeError) as e:
            loop.call_later(1, print, x=1)
        errors.append(str(e.value).replace("Loop.", "RLoop.").replace("RRLoop", "RLoop"))
    finally:
        loop.close()
    expected = []
    oracle = rloop.new_event_loop()
    try:
        for args in [(None, print), ("1", print), (1j, print)]:
            for meth in (oracle.call_later, oracle.call_at):
                with pytest.raises(TypeError) as e:
                    meth(*args)
                expected.append(str(e.value))
        with pytest.raises(TypeError) as e:
            oracle.call_later(1, print, x=1)
        expected.append(str(e.value))
    finally:
        oracle.close()
    assert errors == expected


@needs_rloop
def test_non_callable_is_rloops_error_at_run_time():
    def program(loop):
        seen = []
        loop.set_exception_handler(lambda ctx: seen.append(type(ctx["exception"]).__name__))
        loop.call_later(0.001, None)
        loop.call_at(loop.time() + 0.001, 42)
        loop.run_until_complete(asyncio.sleep(0.02))
        return seen

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"] == ["TypeError", "TypeError"]


# ---- close ------------------------------------------------------------------------


@needs_rloop
def test_closed_loop_takes_timers_as_rloop():
    def program(loop):
        loop.call_later(10, print)
        loop.close()
        h = loop.call_later(0.001, print)
        h2 = loop.call_at(loop.time() + 1, print)
        h3 = loop.call_later(0, print)
        return type(h).__name__, h.cancelled(), type(h2).__name__, h3 is not None

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"]


@needs_rloop
def test_close_closes_the_wheel():
    loop = pwr.Loop()
    h = loop.call_later(10, print)
    loop.close()
    assert loop.wheel.closed if hasattr(loop.wheel, "closed") else True
    with pytest.raises(RuntimeError):
        loop.wheel.call_at(1.0, print)
    assert loop._rl_timer is None
    h.cancel()  # after close: nothing
    loop.close()  # twice: nothing


@needs_rloop
def test_close_while_running_refused_as_rloop():
    def program(loop):
        async def main():
            with pytest.raises(RuntimeError) as e:
                loop.close()
            return str(e.value)

        return loop.run_until_complete(main())

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"]


def _collected(factory) -> bool:
    loop = factory()
    loop.call_later(10, print)
    loop.run_until_complete(asyncio.sleep(0.001))
    loop.close()
    ref = weakref.ref(loop)
    del loop
    gc.collect()
    return ref() is None


@needs_rloop
def test_closed_loop_is_collected_when_rloops_is():
    """rloop 0.5's loop is never collected (its Rust object is in a cycle
    the collector cannot see: the child watcher holds the loop); ours is
    collected exactly when rloop's is."""
    assert _collected(pwr.Loop) == _collected(rloop.new_event_loop)


@needs_rloop
def test_close_releases_the_pending_timers():
    loop = pwr.Loop()

    class Obj:
        def m(self):
            pass

    obj = Obj()
    ref = weakref.ref(obj)
    loop.call_later(10, obj.m)
    loop.call_at(loop.time() + 1, obj.m)
    del obj
    loop.run_until_complete(asyncio.sleep(0.001))
    assert ref() is not None
    loop.close()
    gc.collect()
    assert ref() is None


@needs_rloop
def test_no_reference_kept_to_callbacks_and_arguments():
    loop = pwr.Loop()

    class Obj:
        def m(self, arg):
            pass

    obj, arg = Obj(), object()
    before = sys.getrefcount(obj), sys.getrefcount(arg)
    try:
        for _ in range(3):
            hs = [loop.call_later(0.001 * (i % 5), obj.m, arg) for i in range(2000)]
            for h in hs[::2]:
                h.cancel()
            hs = [loop.call_at(loop.time() + 10, obj.m, arg) for _ in range(1000)]
            for h in hs:
                h.cancel()
            del hs
            loop.run_until_complete(asyncio.sleep(0.01))
        gc.collect()
        assert (sys.getrefcount(obj), sys.getrefcount(arg)) == before
        assert len(loop.wheel) == 0
    finally:
        loop.close()


# ---- errors, context, debug --------------------------------------------------------


@needs_rloop
def test_timer_exception_goes_to_the_loop_handler_as_rloop():
    def program(loop):
        seen = []
        loop.set_exception_handler(lambda ctx: seen.append(ctx))  # rloop: handler(context)

        def boom():
            raise ValueError("x")

        loop.call_later(0.001, boom)
        after = []
        loop.call_later(0.002, after.append, 1)
        loop.run_until_complete(asyncio.sleep(0.02))
        return after, seen

    out = both(program)
    (after_r, seen_r), (after_p, seen_p) = out["rloop"], out["pywheel.rloop"]
    assert after_r == after_p == [1]
    assert len(seen_r) == len(seen_p) == 1
    assert list(seen_p[0]) == list(seen_r[0]) == ["exception", "message", "handle"]
    assert type(seen_p[0]["exception"]) is ValueError
    assert seen_p[0]["message"].startswith("Exception in callback ")


@needs_rloop
def test_keyboard_interrupt_in_a_timer_is_reported_as_rloop():
    def program(loop):
        seen = []
        loop.set_exception_handler(lambda ctx: seen.append(type(ctx["exception"]).__name__))

        def interrupt():
            raise KeyboardInterrupt

        ran = []
        loop.call_later(0.001, interrupt)
        loop.call_later(0.001, ran.append, "same batch")
        loop.call_later(0.003, ran.append, "after")
        loop.run_until_complete(asyncio.sleep(0.02))
        return ran, seen

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"] == (["same batch", "after"], ["KeyboardInterrupt"])


@needs_rloop
def test_timer_runs_in_the_given_context():
    var = contextvars.ContextVar("var", default="none")

    def program(loop):
        seen = []
        ctx = contextvars.copy_context()
        ctx.run(var.set, "given")
        loop.call_later(0.001, lambda: seen.append(var.get()), context=ctx)
        loop.call_later(0, lambda: seen.append(var.get()), context=ctx)
        token = var.set("current")
        loop.call_later(0.001, lambda: seen.append(var.get()))
        var.reset(token)
        loop.run_until_complete(asyncio.sleep(0.02))
        return sorted(seen)

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"] == ["current", "given", "given"]


@needs_rloop
def test_debug_mode_is_rloops():
    def program(loop):
        loop.set_debug(True)
        ran = []
        h = loop.call_later(0.001, ran.append, 1)
        loop.call_later(0.001, ran.append, 2).cancel()
        loop.run_until_complete(asyncio.sleep(0.02))
        return loop.get_debug(), ran, h.cancelled()

    out = both(program)
    assert out["pywheel.rloop"] == out["rloop"] == (False, [1], False)


@needs_rloop
def test_a_subclass_keeps_its_own_call_later():
    class Mine(pwr.Loop):
        def call_later(self, delay, callback, *args, context=None):
            self.asked.append(delay)
            return super().call_later(delay, callback, *args, context=context)

    loop = Mine()
    loop.asked = []
    try:
        loop.run_until_complete(asyncio.sleep(0.002))
        assert "call_later" not in loop.__dict__
        assert loop.asked == [0.002]
    finally:
        loop.close()
