"""pywheel.uvloop runs timers in uvloop's order: uvloop itself is the oracle.

uvloop makes a timer whose delay rounds to 0 ms (``call_later(0)``, a
negative delay, a ``call_at`` in the past) a ``call_soon``: it runs in the
next iteration, in order with the callbacks scheduled around it.
pywheel.uvloop must run such a timer at the same place (its soon timers:
pywheel/uvloop.py), whatever else is pending on the wheel.  Random programs
of call_soon / call_later / call_at with zero, negative, past and positive
delays, scheduling more from inside their callbacks and cancelling, run on
uvloop and on pywheel.uvloop, and the order in which their callbacks ran must
be the same.

Real time and determinism: a positive timer's place among ready callbacks
depends on how long the program took (and pywheel.uvloop runs a timer that
fell due after the callbacks ready before it, a documented difference).  So
every positive timer here gets its own slot, a multiple of SLOT seconds after
the program's start, and a run counts only if it was clean: each slot's
callbacks all ran before the next slot's timer (the trace's slots never go
down).  Then the order is uvloop's rule alone, and a run that was not clean
(a loaded machine) is run again, not compared.  Delays under 0.5 ms, which
uvloop rounds to 0 and runs early, are a documented difference and not drawn.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

try:
    import uvloop

    from pywheel import uvloop as pwu
except ImportError:
    uvloop = pwu = None

pytestmark = pytest.mark.skipif(
    uvloop is None, reason="uvloop is not installed (pip install 'pywheel[uvloop]')"
)

SLOT = 0.015  # seconds between two positive timers' nominal deadlines

# Delays and deadline offsets that uvloop makes a call_soon: zero, negative,
# past, far past, and positive ones too small to move a float loop.time().
ZERO_DELAYS = [0, 0.0, -0.0, -0.001, -1, -1e300, float("-inf"), 1e-20]
PAST_OFFSETS = [0.0, -0.001, -5.0, -1e9]


def run_order(factory, ops, *, debug=False):
    """Runs the program `ops` (see programs()) on a fresh loop; returns the
    trace [(name, slot), ...] in the order the callbacks ran."""
    loop = factory()
    loop.set_debug(debug)
    trace = []
    handles = []
    t0 = [0.0]

    def node(name, slot, children):
        def cb():
            trace.append((name, slot))
            for op in children:
                do(op, slot)

        cb.__qualname__ = name
        return cb

    def do(op, slot):
        kind = op[0]
        if kind == "cancel":
            if handles:
                handles[op[1] % len(handles)].cancel()
            return
        name, child_slot, arg, children = op[1], op[2], op[3], op[4]
        cb = node(name, child_slot, children)
        if kind == "soon":
            h = loop.call_soon(cb)
        elif kind == "later":
            h = loop.call_later(arg, cb)
        elif kind == "at":
            h = loop.call_at(loop.time() + arg, cb)
        elif kind == "at_abs":
            h = loop.call_at(arg, cb)
        elif kind == "pos_later":  # its slot's deadline, from this slot's
            h = loop.call_later((child_slot - slot) * SLOT, cb)
        else:  # "pos_at"
            h = loop.call_at(loop.time() + (child_slot - slot) * SLOT, cb)
        handles.append(h)

    async def main():
        t0[0] = loop.time()
        for op in ops:
            do(op, 0)
        last = max([0] + [s for _, s in walk(ops)])
        await asyncio.sleep((last + 2) * SLOT)
        for _ in range(64):  # every zero-delay chain ends within these iterations
            await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return trace


def walk(ops):
    for op in ops:
        if op[0] != "cancel":
            yield op[1], op[2]
            yield from walk(op[4])


def clean(trace) -> bool:
    slots = [s for _, s in trace]
    return slots == sorted(slots)


@st.composite
def programs(draw, max_ops=7, max_depth=3, max_positive=3):
    names = iter(f"n{i}" for i in range(10_000))
    positive = [0]

    def ops(depth, slot):
        out = []
        for _ in range(draw(st.integers(0, max_ops if depth == 0 else 3))):
            kind = draw(
                st.sampled_from(["soon", "soon", "later", "later", "at", "at_abs", "cancel", "pos"])
            )
            if kind == "cancel":
                out.append(("cancel", draw(st.integers(0, 20))))
                continue
            arg = None
            child_slot = slot
            if kind == "later":
                arg = draw(st.sampled_from(ZERO_DELAYS))
            elif kind == "at":
                arg = draw(st.sampled_from(PAST_OFFSETS))
            elif kind == "at_abs":
                arg = draw(st.sampled_from([0.0, -1.0, 1.0, -1e300]))  # long past
            elif kind == "pos":
                if positive[0] >= max_positive:
                    kind, arg = "soon", None
                else:
                    positive[0] += 1
                    kind = draw(st.sampled_from(["pos_later", "pos_at"]))
                    child_slot = positive[0]  # after every slot drawn before
            children = ops(depth + 1, child_slot) if depth < max_depth else []
            out.append((kind, next(names), child_slot, arg, children))
        return out

    return ops(0, 0)


def compare(ops, debug):
    for _attempt in range(5):
        want = run_order(uvloop.new_event_loop, ops, debug=debug)
        got = run_order(pwu.new_event_loop, ops, debug=debug)
        if clean(want) and clean(got):
            assert [n for n, _ in got] == [n for n, _ in want], (ops, want, got)
            return
    reject()  # the machine was too slow five times over: nothing to compare


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(ops=programs(), debug=st.booleans())
def test_timers_run_in_uvloop_order_on_random_programs(ops, debug):
    compare(ops, debug)


@pytest.mark.parametrize("debug", [False, True])
def test_zero_delay_and_past_timers_run_in_uvloop_order(debug):
    """The issue's program: uvloop runs ABCDEFG (each timer there is a
    call_soon); pywheel.uvloop ran AFEBDCG (all due timers in one batch by
    deadline, where the first was scheduled)."""

    def prog(loop, out):
        def r(n):
            return lambda: out.append(n)

        loop.call_soon(r("A"))
        loop.call_later(0, r("B"))
        loop.call_soon(r("C"))
        loop.call_later(0, r("D"))
        loop.call_later(-1, r("E"))
        loop.call_at(loop.time() - 5, r("F"))
        loop.call_soon(r("G"))

    assert _on_both(prog, debug) == ["ABCDEFG", "ABCDEFG"]


def test_zero_delay_timer_is_never_swept_into_a_queued_run_of_the_wheel():
    """A soon timer runs at its own place, never in a run of the wheel
    queued before it (which runs the timers that fell due): X queues that
    run the way a libuv timer that fired does (Loop._queue_run; nothing on
    uvloop), then Y, then a call_later(0) of Z.  uvloop runs X Y Z; the wheel
    used to run Z inside that run, before Y."""

    def prog(loop, out):
        def x():
            out.append("X")
            if isinstance(loop, pwu.Loop):
                loop._queue_run()  # as _on_uv_timer does when a deadline fell due
            loop.call_soon(out.append, "Y")
            loop.call_later(0, out.append, "Z")

        loop.call_soon(x)

    assert _on_both(prog) == ["XYZ", "XYZ"]


def _on_both(prog, debug: bool = False) -> list[str]:
    """What ``prog(loop, out)`` appends to ``out`` on uvloop, then on
    pywheel.uvloop, each run from a task for 10 ms."""
    results = []
    for factory in (uvloop.new_event_loop, pwu.new_event_loop):
        loop = factory()
        loop.set_debug(debug)
        out: list[str] = []

        async def main(out=out):
            prog(asyncio.get_running_loop(), out)
            await asyncio.sleep(0.01)

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
        results.append("".join(out))
    return results


# ---- the soon timers are the wheel's timers all the same ----------------------


def test_soon_timer_is_a_pending_wheel_handle_until_it_runs():
    loop = pwu.new_event_loop()
    try:
        ran = []
        h = loop.call_later(0, ran.append, 1)
        g = loop.call_at(loop.time() - 1, ran.append, 2)
        assert len(loop.wheel) == 2 and loop.wheel.next_when() is None
        assert not h.cancelled() and h.when() <= loop.time()
        g.cancel()
        assert g.cancelled() and len(loop.wheel) == 1
        loop.run_until_complete(asyncio.sleep(0.005))
        assert ran == [1] and len(loop.wheel) == 0
        stats = loop.wheel.stats()
        # (the sleep's timer is the third scheduled and the second fired)
        assert (stats["scheduled"], stats["fired"], stats["cancelled"]) == (3, 2, 1)
    finally:
        loop.close()


def test_soon_timer_rescheduled_runs_at_its_new_deadline_only():
    loop = pwu.new_event_loop()
    try:
        ran = []
        h = loop.call_later(0, ran.append, "moved")
        assert h.reschedule(loop.time() + 0.02)
        loop.run_until_complete(asyncio.sleep(0.005))
        assert ran == []  # its queued run found it moved
        loop.run_until_complete(asyncio.sleep(0.03))
        assert ran == ["moved"]
    finally:
        loop.close()


def test_soon_timers_pending_at_close_are_released():
    loop = pwu.new_event_loop()

    class Payload:
        pass

    p = Payload()
    ref = weakref.ref(p)
    loop.call_later(0, print, p)
    loop.call_at(-1e300, print, p)
    del p
    loop.close()
    gc.collect()
    assert ref() is None


def test_soon_timer_error_goes_to_the_loop_exception_handler():
    loop = pwu.new_event_loop()
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(type(ctx["exception"])))
    try:

        def boom():
            raise ZeroDivisionError

        loop.call_later(0, boom)
        after = loop.call_later(0, seen.append, "after")
        loop.run_until_complete(asyncio.sleep(0.005))
        assert seen == [ZeroDivisionError, "after"] and not after.cancelled()
    finally:
        loop.close()


def test_soon_timer_keyboard_interrupt_ends_the_run_as_on_uvloop():
    for factory in (uvloop.new_event_loop, pwu.new_event_loop):
        loop = factory()
        ran = []
        try:

            def interrupt():
                raise KeyboardInterrupt

            loop.call_later(0, interrupt)
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(asyncio.sleep(0.01))
            loop.call_later(0, ran.append, "next run")
            loop.run_until_complete(asyncio.sleep(0.005))
            assert ran == ["next run"], factory
        finally:
            loop.close()


def test_soon_timer_on_a_closed_loop_raises_as_uvloop():
    for factory in (uvloop.new_event_loop, pwu.new_event_loop):
        loop = factory()
        loop.close()
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            loop.call_later(0, print)
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            loop.call_at(0, print)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
