"""pywheel.uvloop: uvloop's loop with its timers on a pywheel wheel.

The reference is uvloop itself (the same program on uvloop.Loop and on
pywheel.uvloop.Loop gives the same trace), and, where the two differ on
purpose (the order of a due timer and a ready callback), the stock loop.
The promises: never early by loop.time(), exact-deadline order, after what
was ready, cancel/close as uvloop, and one libuv timer however many are
pending.  Without uvloop only the import tests run (the others skip, saying
so); the test extra installs uvloop wherever PyPI has a wheel for it."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import random
import socket
import subprocess
import sys
import time
import weakref

import pytest
from helpers import child_env

try:
    import uvloop
    import uvloop.loop as _uvloop_loop

    from pywheel import uvloop as pwu
except ImportError:
    uvloop = pwu = None

needs_uvloop = pytest.mark.skipif(
    uvloop is None, reason="uvloop is not installed (pip install 'pywheel[uvloop]')"
)

LOOPS = {} if uvloop is None else {"uvloop": uvloop.Loop, "pywheel.uvloop": pwu.Loop}


def on(factory, coro_fn):
    loop = factory()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


def uv_timers() -> int:
    """uvloop TimerHandles alive and not cancelled: libuv timers armed."""
    return sum(
        1 for o in gc.get_objects() if type(o) is _uvloop_loop.TimerHandle and not o.cancelled()
    )


# ---- import: optional, and never by `import pywheel` ------------------------


def test_import_pywheel_never_imports_uvloop():
    code = (
        "import sys, pywheel, pywheel.asyncio, pywheel.testing\n"
        "assert 'uvloop' not in sys.modules, 'uvloop imported'\n"
        "assert 'pywheel.uvloop' not in sys.modules\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert proc.returncode == 0, proc.stderr


def test_without_uvloop_the_import_error_says_how_to_install():
    code = (
        "import sys\n"
        "sys.modules['uvloop'] = None  # as if not installed\n"
        "try:\n"
        "    from pywheel import uvloop\n"
        "except ImportError as e:\n"
        "    print('MSG', e)\n"
        "else:\n"
        "    raise SystemExit('imported')\n"
        "import pywheel, pywheel.asyncio  # still fine\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'pywheel[uvloop]'" in proc.stdout, proc.stdout


# ---- names: the whole change is the import ------------------------------------


@needs_uvloop
def test_names_mirror_uvloop():
    assert issubclass(pwu.Loop, uvloop.Loop)
    assert set(pwu.__all__) == {"Loop", "new_event_loop", "run"}
    public = {n for n in uvloop.__all__ if n not in ("install", "EventLoopPolicy")}
    assert public <= set(pwu.__all__)
    loop = pwu.new_event_loop()
    assert type(loop) is pwu.Loop
    loop.close()

    async def main():
        return type(asyncio.get_running_loop()), await asyncio.sleep(0.001, "done")

    assert pwu.run(main()) == (pwu.Loop, "done")
    assert pwu.run(main(), debug=True) == (pwu.Loop, "done")


@needs_uvloop
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_policy_and_install_where_uvloop_has_them():
    try:
        uvloop.EventLoopPolicy  # noqa: B018
    except AttributeError:
        with pytest.raises(AttributeError):
            pwu.EventLoopPolicy  # noqa: B018
        return
    policy = pwu.EventLoopPolicy()
    assert isinstance(policy, uvloop.EventLoopPolicy)
    loop = policy.new_event_loop()
    assert type(loop) is pwu.Loop
    loop.close()
    old = asyncio.get_event_loop_policy()
    try:
        pwu.install()
        assert isinstance(asyncio.get_event_loop_policy(), pwu.EventLoopPolicy)
    finally:
        asyncio.set_event_loop_policy(old)


# ---- the same traces as uvloop --------------------------------------------------


async def _sleep_timeout_wait_for_program():
    """Concurrent tasks started together: what each ended with, and whether
    it ended before its deadline (by loop.time()).  The order in which they
    end is the deadlines' only as far as the machine's load allows (a
    timeout takes a few iterations to surface), so it is not compared here:
    test_timers_run_by_exact_deadline_within_one_millisecond checks order."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    outcome = {}

    def done(name, result, deadline):
        outcome[name] = (result, loop.time() >= t0 + deadline)

    async def sleeper(name, delay):
        done(name, await asyncio.sleep(delay, "slept"), delay)

    async def wait_for_times_out():
        try:
            await asyncio.wait_for(asyncio.sleep(1), 0.015)
        except TimeoutError:
            done("wait_for", "timed out", 0.015)

    async def wait_for_completes():
        done("wait_for ok", await asyncio.wait_for(asyncio.sleep(0.025, "done"), 1), 0.025)

    async def timeout_expires():
        try:
            async with asyncio.timeout(0.035) as cm:
                await asyncio.sleep(1)
        except TimeoutError:
            done("timeout", ("expired", cm.expired()), 0.035)

    async def timeout_rescheduled():
        async with asyncio.timeout(0.001) as cm:
            cm.reschedule(loop.time() + 0.5)
            await asyncio.sleep(0.045)
        done("rescheduled", ("kept", cm.expired()), 0.045)

    async def wait_first():
        sleeps = [asyncio.ensure_future(asyncio.sleep(d, d)) for d in (0.03, 0.01, 0.02)]
        finished, pending = await asyncio.wait(sleeps, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:
            t.cancel()
        done("wait", min(t.result() for t in finished), 0.01)

    await asyncio.gather(
        *[sleeper(i, d) for i, d in enumerate([0.03, 0.01, 0.05, 0.02, 0.04, 0])],
        wait_for_times_out(),
        wait_for_completes(),
        timeout_expires(),
        timeout_rescheduled(),
        wait_first(),
    )
    return outcome


@needs_uvloop
def test_sleep_timeout_wait_for_outcomes_are_uvloops():
    outcomes = {name: on(f, _sleep_timeout_wait_for_program) for name, f in LOOPS.items()}
    results = {name: {k: r for k, (r, _) in o.items()} for name, o in outcomes.items()}
    assert results["pywheel.uvloop"] == results["uvloop"]
    assert len(results["uvloop"]) == 11
    # Never early, through asyncio's layers too (uvloop's own rounding to the
    # nearest millisecond ends some of these before their deadline).
    assert all(late_enough for _, late_enough in outcomes["pywheel.uvloop"].values())


# ---- never early, deadline order, after what was ready --------------------------


@needs_uvloop
def test_never_early_by_loop_time():
    """Deadlines off libuv's millisecond: each timer runs once loop.time()
    reads its when(), which is the deadline asked for (to the nanosecond,
    the wheel's unit)."""
    rng = random.Random(7)
    loop = pwu.Loop()
    late = []

    def check(box):
        handle, lo, hi = box
        now = loop.time()
        assert lo - 1e-9 <= handle.when() <= hi + 1e-9
        late.append(now - handle.when())

    async def main():
        for _ in range(20):
            for _ in range(25):
                delay = rng.uniform(-0.002, 0.012)
                when = loop.time() + delay
                box = []
                box += [loop.call_at(when, check, box), when, when]
                # call_later reads the clock itself, and uvloop's time() can
                # move on by a millisecond between two reads: its when() is
                # the delay after a reading between these two
                box2 = []
                lo = loop.time() + delay
                box2 += [loop.call_later(delay, check, box2), lo, loop.time() + delay]
            await asyncio.sleep(0.013)
        await asyncio.sleep(0.02)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(late) == 1000
    assert min(late) >= 0, min(late)


@needs_uvloop
def test_timers_run_by_exact_deadline_within_one_millisecond():
    # (a deadline already past when scheduled is a call_soon on uvloop, and
    # runs there in scheduling order: a loaded machine that took 20 ms to
    # schedule these runs the program again)
    for _attempt in range(5):
        loop = pwu.Loop()
        ran = []

        async def main(loop=loop, ran=ran):
            base = loop.time() + 0.02
            offsets = [k * 0.0001 for k in range(10)] * 2  # ties too, FIFO among them
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


@needs_uvloop
def test_due_timer_runs_after_what_was_ready_as_on_the_stock_loop():
    """A callback that became ready before a timer fell due runs first (the
    stock loop's order; uvloop runs its own timers ahead of ready callbacks)."""

    def program(loop):
        trace = []

        def first():
            loop.call_later(0.001, trace.append, "timer")
            time.sleep(0.005)  # the timer is due before the loop gets back
            loop.call_soon(trace.append, "ready")

        loop.call_soon(first)
        loop.call_later(0.05, loop.stop)
        loop.run_forever()
        loop.close()
        return trace

    assert program(pwu.Loop()) == program(asyncio.SelectorEventLoop()) == ["ready", "timer"]


@needs_uvloop
def test_timer_scheduled_in_the_past_runs_next_as_on_uvloop():
    loop = pwu.Loop()
    trace = []

    def cb(n):
        trace.append(n)
        if n < 3:
            loop.call_later(-1, cb, n + 1)  # a past deadline, from a timer
            loop.call_soon(trace.append, f"soon {n}")

    loop.call_later(0, cb, 0)
    loop.call_later(0.05, loop.stop)
    loop.run_forever()
    loop.close()
    # uvloop runs a past deadline as a call_soon: in the next iteration, in
    # the order it was scheduled with the ready callbacks; so does the wheel
    # (which runs every due timer of that moment there, by deadline).
    assert trace == [0, 1, "soon 0", 2, "soon 1", 3, "soon 2"]


@needs_uvloop
def test_zero_delay_timer_loop_does_not_starve_io():
    loop = pwu.Loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    got = []
    spins = [0]

    def spin():
        spins[0] += 1
        if not got:
            loop.call_later(0, spin)

    def readable():
        got.append(a.recv(10))
        loop.remove_reader(a)
        loop.call_later(0.01, loop.stop)

    loop.add_reader(a, readable)
    loop.call_later(0, spin)
    b.send(b"x")
    loop.run_forever()
    loop.close()
    a.close()
    b.close()
    assert got == [b"x"]


# ---- the wheel really holds them: one libuv timer ----------------------------------


@needs_uvloop
def test_ten_thousand_pending_timers_use_one_libuv_timer():
    loop = pwu.Loop()
    ran = []

    async def main():
        gc.collect()
        before = uv_timers()
        now = loop.time()
        rng = random.Random(11)
        # (deadlines far enough ahead that none is past by the time it is
        # scheduled on a loaded machine: a past one runs as uvloop runs it,
        # in scheduling order, as a call_soon would)
        whens = [now + 0.3 + rng.random() * 0.03 for _ in range(10_000)]
        for w in whens:
            loop.call_at(w, ran.append, w)
        assert len(loop.wheel) == 10_000
        assert uv_timers() - before == 1
        # an earlier deadline re-arms: still one
        loop.call_at(now + 0.25, ran.append, now + 0.25)
        assert uv_timers() - before == 1
        await asyncio.sleep(0.36)
        return whens

    try:
        whens = loop.run_until_complete(main())
        assert len(loop.wheel) == 0
    finally:
        loop.close()
    assert ran == sorted([*whens, ran[0]])
    assert len(ran) == 10_001


@needs_uvloop
def test_later_deadlines_do_not_rearm():
    loop = pwu.Loop()
    loop.call_later(1, print)
    armed = loop._uv_timer
    for k in range(100):
        loop.call_later(2 + k, print)
    assert loop._uv_timer is armed
    loop.call_later(0.5, print)
    assert loop._uv_timer is not armed and armed.cancelled()
    loop.close()


# ---- handles and cancellation ----------------------------------------------------------


@needs_uvloop
def test_handles_behave_as_uvloops():
    loop = pwu.Loop()
    ran = []
    try:
        h = loop.call_later(0.01, ran.append, "h")
        when = h.when()
        assert isinstance(when, float) and when > loop.time()
        assert not h.cancelled()
        assert h.cancel() is None and h.cancelled()
        assert h.cancel() is None and h.cancelled()  # idempotent
        assert isinstance(h.get_context(), contextvars.Context)
        k = loop.call_later(0.001, ran.append, "k")
        loop.run_until_complete(asyncio.sleep(0.03))
        assert ran == ["k"]
        k.cancel()  # after it ran: as uvloop's, cancelled() turns True
        assert k.cancelled()
    finally:
        loop.close()


@needs_uvloop
def test_cancel_the_armed_timer_and_inside_a_batch():
    loop = pwu.Loop()
    ran = []
    try:
        first = loop.call_later(0.002, ran.append, "first")
        victim = None

        def killer():
            ran.append("killer")
            victim.cancel()

        loop.call_later(0.005, killer)
        victim = loop.call_later(0.005, ran.append, "victim")  # same batch, after killer
        loop.call_later(0.008, ran.append, "last")
        first.cancel()  # the one the libuv timer is armed for
        loop.run_until_complete(asyncio.sleep(0.03))
        assert ran == ["killer", "last"]
        assert len(loop.wheel) == 0
    finally:
        loop.close()


@needs_uvloop
def test_task_cancel_cancels_its_sleep_timer():
    loop = pwu.Loop()

    async def main():
        t = asyncio.ensure_future(asyncio.sleep(100))
        await asyncio.sleep(0)
        assert len(loop.wheel) == 1
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert len(loop.wheel) == 0

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


@needs_uvloop
def test_far_and_infinite_deadlines_wait():
    loop = pwu.Loop()
    ran = []
    try:
        h1 = loop.call_later(float("inf"), ran.append, 1)
        h2 = loop.call_at(1e300, ran.append, 2)  # beyond the wheel's clock
        assert loop._uv_timer is None  # nothing to wake for
        loop.call_at(-1e300, ran.append, 3)  # far past: runs now
        loop.run_until_complete(asyncio.sleep(0.01))
        assert ran == [3]
        assert not h1.cancelled() and not h2.cancelled()
    finally:
        loop.close()
    assert h1.cancelled() and h2.cancelled()


@needs_uvloop
@pytest.mark.parametrize("name", ["uvloop", "pywheel.uvloop"])
def test_bad_arguments_as_uvloop(name):
    loop = LOOPS[name]()
    try:
        with pytest.raises(TypeError):
            loop.call_later(None, print)
        with pytest.raises(TypeError):
            loop.call_at(None, print)
        with pytest.raises(ValueError):
            loop.call_later(float("nan"), print)
        with pytest.raises(TypeError):
            loop.call_later("1", print)
    finally:
        loop.close()


@needs_uvloop
def test_non_callable_refused_at_scheduling():
    """A difference (docs, Differences from uvloop): uvloop fails when the timer runs."""
    loop = pwu.Loop()
    try:
        with pytest.raises(TypeError):
            loop.call_later(0.01, 5)
        with pytest.raises(TypeError):
            loop.call_at(loop.time() + 0.01, "not callable")
        assert len(loop.wheel) == 0
    finally:
        loop.close()


# ---- closing, errors, context, debug -----------------------------------------------


@needs_uvloop
@pytest.mark.parametrize("name", ["uvloop", "pywheel.uvloop"])
def test_closed_loop_refuses_timers_as_uvloop(name):
    loop = LOOPS[name]()
    ran = []
    h = loop.call_later(0.001, ran.append, 1)
    loop.close()
    loop.close()  # idempotent
    assert h.cancelled()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_later(1, print)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_at(loop.time() + 1, print)
    assert ran == []
    if name == "pywheel.uvloop":
        assert loop.wheel.closed and len(loop.wheel) == 0


@needs_uvloop
def test_close_while_running_refused_as_uvloop():
    loop = pwu.Loop()

    async def main():
        with pytest.raises(RuntimeError):
            loop.close()
        await asyncio.sleep(0.001)

    loop.run_until_complete(main())
    loop.close()


@needs_uvloop
def test_timer_exception_goes_to_the_loop_handler():
    loop = pwu.Loop()
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append((lp, ctx)))

    def boom():
        raise ValueError("x")

    h = loop.call_later(0.001, boom)
    after = []
    loop.call_later(0.002, after.append, 1)
    loop.run_until_complete(asyncio.sleep(0.02))
    loop.close()
    assert after == [1]
    assert len(seen) == 1
    lp, ctx = seen[0]
    assert lp is loop and isinstance(ctx["exception"], ValueError) and ctx["handle"] is h


@needs_uvloop
def test_keyboard_interrupt_in_a_timer_propagates_and_the_loop_goes_on():
    loop = pwu.Loop()

    def interrupt():
        raise KeyboardInterrupt

    loop.call_later(0.001, interrupt)
    ran = []
    loop.call_later(0.001, ran.append, "same batch")
    with pytest.raises(KeyboardInterrupt):
        loop.run_until_complete(asyncio.sleep(1))
    loop.call_later(0.001, ran.append, "after")
    loop.run_until_complete(asyncio.sleep(0.02))
    loop.close()
    assert ran == ["same batch", "after"]


@needs_uvloop
def test_timer_runs_in_the_given_context():
    var = contextvars.ContextVar("var", default="none")
    loop = pwu.Loop()
    seen = []
    ctx = contextvars.copy_context()
    ctx.run(var.set, "given")
    loop.call_later(0.001, lambda: seen.append(var.get()), context=ctx)
    var.set("current")
    loop.call_later(0.001, lambda: seen.append(var.get()))
    loop.run_until_complete(asyncio.sleep(0.02))
    loop.close()
    assert seen == ["given", "current"]


@needs_uvloop
def test_debug_mode_timers():
    loop = pwu.Loop()
    loop.set_debug(True)
    ran = []
    try:
        h = loop.call_later(0.001, ran.append, 1)
        assert isinstance(h, asyncio.TimerHandle) and h._source_traceback
        c = loop.call_later(0.001, ran.append, 2)
        c.cancel()
        assert c.cancelled()

        async def coro():
            pass

        with pytest.raises(TypeError):
            loop.call_later(0.001, coro)
        loop.run_until_complete(asyncio.sleep(0.02))
        assert ran == [1]
        assert len(loop.wheel) == 0
    finally:
        loop.close()


@needs_uvloop
def test_closed_loop_is_collected():
    loop = pwu.Loop()
    loop.call_later(10, print)
    loop.run_until_complete(asyncio.sleep(0.001))
    loop.close()
    ref = weakref.ref(loop)
    wheel_ref = weakref.ref(loop.wheel)
    del loop
    gc.collect()
    assert ref() is None and wheel_ref() is None
