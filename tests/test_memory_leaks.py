"""Memory (docs/explanation/guarantees.md, "Memory"): fired, cancelled and
closed timers release their callback, arguments and context at once, with
or without the collector; reference cycles through a callback (back to its
handle, its wheel, a subclass with a finalizer) are collected; repeated
schedule/fire/cancel/raise/close cycles, on ManualWheels and threaded wheels
and on error paths, come back to the same allocated blocks (pymalloc,
tracemalloc and malloc) and refcounts.  Dropping a wheel cancels its timers
(docs/explanation/guarantees.md, "Dropping a wheel")."""

import contextvars
import ctypes
import ctypes.util
import gc
import math
import sys
import threading
import time
import tracemalloc
import weakref

import pytest
from helpers import Callback, raiser, threads_back, threads_now, wait_for

from pywheel import ManualWheel, Wheel


def _leak_workload_manual(iterations, cb, arg, ctx, handler):
    """schedule / fire / cancel / repeat / raise / close cycles on ManualWheels."""
    for i in range(iterations):
        w = ManualWheel(tick=0.001)
        w.set_exception_handler(handler)
        hs = [w.call_later(0.001 * k, cb, arg, i, context=ctx) for k in range(5)]
        assert hs[1].cancel() is True
        assert hs[1].cancel() is False
        r = w.call_every(0.002, cb, arg, context=ctx)
        w.call_at(0.003, raiser, arg)  # error -> handler
        w.call_later(0.007, r.cancel)  # repeating stopped by another timer
        w.call_every(0.004, lambda: None)  # still pending at close
        w.call_later(60, cb, arg)  # pending at close
        w.call_later(float("inf"), cb, arg)
        assert w.advance(0.01) > 0
        repr(hs[0]), repr(r), w.stats(), len(w), w.next_deadline(), r.when(), r.interval
        with w:
            pass
        assert w.close() == []
        with pytest.raises(RuntimeError):
            w.call_later(1, cb, arg)
        with pytest.raises(ValueError):
            ManualWheel().call_later(float("nan"), cb, arg)
        with pytest.raises(TypeError):
            ManualWheel().call_every(1, cb, arg, context=42)
        # a wheel dropped with timers pending, and one whose repeating timer closes it
        m = ManualWheel()
        m.call_every(0.001, cb, arg, context=ctx)
        m.call_later(0.5, cb, arg)
        m.advance(0.003)
        del m
        m = ManualWheel()
        m.call_every(0.001, m.close)
        m.advance(0.01)


def _measure(workload, *args, rounds=(100, 1000)):
    """Blocks (pymalloc and tracemalloc) after a warm-up and after a long run.

    Returns the growth of sys.getallocatedblocks(), of tracemalloc's traced
    blocks and of its traced bytes over the long run."""
    warm, long = rounds
    workload(warm, *args)
    gc.collect()
    tracemalloc.start()
    try:
        workload(warm, *args)
        gc.collect()
        blocks0 = sys.getallocatedblocks()
        traced0 = len(tracemalloc.take_snapshot().traces)
        bytes0 = tracemalloc.get_traced_memory()[0]
        workload(long, *args)
        gc.collect()
        blocks1 = sys.getallocatedblocks()
        traced1 = len(tracemalloc.take_snapshot().traces)
        bytes1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return blocks1 - blocks0, traced1 - traced0, bytes1 - bytes0


# A constant allowance for interpreter caches (type caches, freelists, the
# tracemalloc snapshot itself); one leaked block per cycle would be thousands.
BLOCK_SLACK = 150
BYTE_SLACK = 32_000


def test_no_leak_in_manual_cycles():
    cb, arg, ctx, handler = Callback(), object(), contextvars.copy_context(), Callback()
    base = [sys.getrefcount(x) for x in (cb, arg, ctx, handler)]
    blocks, traced, nbytes = _measure(_leak_workload_manual, cb, arg, ctx, handler)
    assert blocks < BLOCK_SLACK, f"{blocks} pymalloc blocks grew over 1000 cycles"
    assert traced < BLOCK_SLACK, f"{traced} traced blocks grew over 1000 cycles"
    assert nbytes < BYTE_SLACK, f"{nbytes} traced bytes grew over 1000 cycles"
    gc.collect()
    assert [sys.getrefcount(x) for x in (cb, arg, ctx, handler)] == base


def _leak_workload_threaded(iterations, cb, arg, ctx, handler):
    """The same cycles on threaded wheels: each creates and stops a thread."""
    for i in range(iterations):
        w = Wheel()
        w.set_exception_handler(handler)
        done = threading.Event()
        hs = [w.call_later(0, cb, arg, i, context=ctx) for _ in range(3)]
        w.call_later(0, raiser, arg)
        r = w.call_every(0.001, cb, arg)
        w.call_later(60, cb, arg).cancel()
        w.call_later(60, cb, arg)  # pending at close
        w.call_later(0.002, done.set)
        assert done.wait(10)
        r.cancel()
        repr(hs[0]), w.stats()
        if i % 2:
            w.close()
        else:
            with w:
                pass


def test_no_leak_in_threaded_cycles():
    cb, arg, ctx, handler = Callback(), object(), contextvars.copy_context(), Callback()
    base = [sys.getrefcount(x) for x in (cb, arg, ctx, handler)]
    threads = threads_now()
    blocks, traced, nbytes = _measure(
        _leak_workload_threaded, cb, arg, ctx, handler, rounds=(30, 300)
    )
    assert blocks < BLOCK_SLACK, f"{blocks} pymalloc blocks grew over 300 wheels"
    assert traced < BLOCK_SLACK, f"{traced} traced blocks grew over 300 wheels"
    assert nbytes < BYTE_SLACK, f"{nbytes} traced bytes grew over 300 wheels"
    assert threads_back(threads)
    gc.collect()
    assert [sys.getrefcount(x) for x in (cb, arg, ctx, handler)] == base


def _mallinfo():
    """glibc's count of bytes in use by malloc(), or None where unavailable."""
    path = ctypes.util.find_library("c")
    if not path:
        return None
    libc = ctypes.CDLL(path)
    if not hasattr(libc, "mallinfo2"):
        return None

    class Mallinfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
            ).split()
        ]

    libc.mallinfo2.restype = Mallinfo2
    return lambda: libc.mallinfo2().uordblks


def test_no_c_level_leak_over_many_wheels():
    # The driver allocates with malloc(), outside Python's allocators: count
    # glibc's bytes in use.  A leaked driver (batch array, core) is > 2 KB a
    # wheel, so 1000 wheels would leak megabytes.
    in_use = _mallinfo()
    if in_use is None:
        pytest.skip("needs glibc's mallinfo2")

    def cycle(n):
        for _ in range(n):
            w = Wheel()
            w.call_later(0, lambda: None)
            w.call_every(0.001, lambda: None)
            w.call_later(10, print)
            w.close()
            m = ManualWheel()
            m.call_later(0.001, print)
            del m

    cycle(200)
    gc.collect()
    before = in_use()
    cycle(1000)
    gc.collect()
    assert in_use() - before < 256 * 1024


def test_no_leak_on_error_paths():
    cb, arg, ctx = Callback(), object(), contextvars.copy_context()
    base = [sys.getrefcount(x) for x in (cb, arg, ctx)]

    def errors(n, *_):
        w = ManualWheel()
        closed = ManualWheel()
        closed.close()
        for _ in range(n):
            for bad in (float("nan"), None, "1", object()):
                for call in (w.call_later, w.call_at, w.call_every):
                    with pytest.raises((TypeError, ValueError)):
                        call(bad, cb, arg, context=ctx)
            with pytest.raises(TypeError):
                w.call_later(1, cb, arg, context={})
            with pytest.raises(TypeError):
                w.call_later(1, 42, arg)
            with pytest.raises(ValueError):
                w.call_every(0, cb, arg)
            with pytest.raises(RuntimeError):
                closed.call_every(1, cb, arg, context=ctx)
            with pytest.raises(ValueError):
                w.advance(-1)
        w.close()

    blocks, traced, nbytes = _measure(errors, rounds=(50, 500))
    assert blocks < BLOCK_SLACK and traced < BLOCK_SLACK and nbytes < BYTE_SLACK
    gc.collect()
    assert [sys.getrefcount(x) for x in (cb, arg, ctx)] == base


RELEASE_VAR = contextvars.ContextVar("pywheel_release")


def test_released_at_once_without_the_collector():
    # cancel(), firing and close() drop the callback, its arguments and its
    # context at once: plain reference counting frees them, no gc needed.
    class Obj:
        def __call__(self, *args):
            pass

    gc.disable()
    try:
        w = ManualWheel()
        refs = {}
        handles = {}
        for end in ("cancel", "fire", "close", "self-cancel", "repeat-cancel"):
            cb, arg, in_ctx = Obj(), Obj(), Obj()
            ctx = contextvars.Context()
            ctx.run(RELEASE_VAR.set, in_ctx)
            refs[end] = [weakref.ref(arg), weakref.ref(in_ctx)]
            if end == "self-cancel":
                box = []
                h = w.call_every(0.001, lambda a, box=box: box[0].cancel(), arg, context=ctx)
                box.append(h)
            elif end == "repeat-cancel":
                h = w.call_every(0.001, cb, arg, context=ctx)
                refs[end].append(weakref.ref(cb))
            else:
                h = w.call_later(0.001 if end == "fire" else 10, cb, arg, context=ctx)
                refs[end].append(weakref.ref(cb))
            handles[end] = h
            del cb, arg, in_ctx, ctx, h
        assert handles["cancel"].cancel()
        w.advance(0.005)
        assert handles["repeat-cancel"].cancel()
        assert w.close() == [handles["close"]]
        for end, weak in refs.items():
            alive = [r() for r in weak if r() is not None]
            assert alive == [], f"{end}: still alive: {alive}"
    finally:
        gc.enable()


# ---- reference cycles through callbacks, arguments, contexts, handlers -------

CYCLE_SHAPES = [
    "callback-closes-over-own-handle",
    "repeating-closes-over-own-handle",
    "callback-closes-over-wheel",
    "repeating-closes-over-wheel-after-runs",
    "callback-closes-over-handle-and-wheel",
    "wheel-in-args",
    "wheel-in-context",
    "handler-closes-over-wheel",
    "bound-method-of-owner",
]
CYCLE_VAR = contextvars.ContextVar("pywheel_cycle")


class Payload:
    pass


class Service:
    """An object that owns a wheel and whose bound method is its callback."""

    def __init__(self, w, p):
        self.wheel = w
        self.payload = p
        self.handle = w.call_every(0.002, self.tick)

    def tick(self):
        pass


def _build_cycle(cls, shape):
    """Builds a wheel in the given cycle; returns weakrefs to wheel and payload."""
    w = cls()
    p = Payload()
    if shape == "callback-closes-over-own-handle":
        box = {}
        box["h"] = w.call_later(100, lambda: (box, p))
    elif shape == "repeating-closes-over-own-handle":
        box = {}
        box["h"] = w.call_every(0.001, lambda: (box, p))
    elif shape == "callback-closes-over-wheel":
        w.call_later(100, lambda: (w, p))
    elif shape == "repeating-closes-over-wheel-after-runs":
        w.call_every(0.001, lambda: (w, p))
        if cls is ManualWheel:
            w.advance(0.01)
        else:
            time.sleep(0.01)
    elif shape == "callback-closes-over-handle-and-wheel":
        box = {}
        box["h"] = w.call_every(50, lambda: (box, w, p))
    elif shape == "wheel-in-args":
        p.wheel = w
        w.call_later(100, print, p)
    elif shape == "wheel-in-context":
        ctx = contextvars.Context()
        ctx.run(CYCLE_VAR.set, (w, p))
        w.call_every(100, print, context=ctx)
    elif shape == "handler-closes-over-wheel":
        w.set_exception_handler(lambda wheel, context: (w, p))
    elif shape == "bound-method-of-owner":
        Service(w, p)
    else:  # pragma: no cover
        raise AssertionError(shape)
    return weakref.ref(w), weakref.ref(p)


@pytest.mark.parametrize("shape", CYCLE_SHAPES)
@pytest.mark.parametrize("cls", [ManualWheel, Wheel])
def test_reference_cycles_are_collected(cls, shape):
    gc.collect()
    threads = threads_now()
    ref_w, ref_p = _build_cycle(cls, shape)

    def gone():
        gc.collect()
        return ref_w() is None and ref_p() is None

    # A threaded wheel in the middle of a batch is alive (its thread holds it)
    # until the batch ends: collect again until it is gone.
    assert wait_for(gone, timeout=10, interval=0.01), f"{shape}: cycle kept alive"
    assert threads_back(threads), "the wheel's thread did not stop"


def test_no_leak_from_cycles_over_many_rounds():
    # The cycles above, built and collected 40 times each (360 cycles): blocks back to base.
    def build_all(n, *_):
        for _ in range(n):
            for shape in CYCLE_SHAPES:
                _build_cycle(ManualWheel, shape)
        gc.collect()

    blocks, traced, nbytes = _measure(build_all, rounds=(5, 40))
    assert blocks < BLOCK_SLACK and traced < BLOCK_SLACK and nbytes < BYTE_SLACK


@pytest.mark.parametrize("end", ["fire", "cancel", "close", "repeat-cancel", "repeat-close"])
def test_refcounts_return_manual(end):
    w = ManualWheel(tick=0.001)
    cb, arg, ctx = Callback(), object(), contextvars.copy_context()
    base = [sys.getrefcount(x) for x in (cb, arg, ctx)]
    if end.startswith("repeat"):
        h = w.call_every(0.001, cb, arg, context=ctx)
        w.advance(0.005)
    else:
        h = w.call_later(0.001, cb, arg, context=ctx)
    assert [sys.getrefcount(x) for x in (cb, arg, ctx)] != base
    if end == "fire":
        assert w.advance(0.01) == 1
    elif end.endswith("cancel"):
        assert h.cancel() is True
    else:
        assert w.close() == [h]
    gc.collect()
    assert [sys.getrefcount(x) for x in (cb, arg, ctx)] == base
    w.close()
    del h
    gc.collect()
    assert [sys.getrefcount(x) for x in (cb, arg, ctx)] == base


@pytest.mark.parametrize("end", ["fire", "cancel", "close"])
def test_refcounts_return_threaded(end):
    w = Wheel()
    cb, arg = Callback(), object()
    base = [sys.getrefcount(x) for x in (cb, arg)]
    h = w.call_later(0.01 if end == "fire" else 10, cb, arg)
    assert [sys.getrefcount(x) for x in (cb, arg)] != base
    if end == "cancel":
        assert h.cancel() is True
    elif end == "close":
        assert w.close() == [h]

    def back():
        gc.collect()
        return [sys.getrefcount(x) for x in (cb, arg)] == base

    assert wait_for(back, timeout=5.0)
    w.close()


def test_refcount_of_raising_callback_and_its_exception(manual):
    manual.set_exception_handler(lambda w, ctx: None)
    arg = object()

    def bad(a):
        raise ValueError(a)

    base = (sys.getrefcount(bad), sys.getrefcount(arg))
    manual.call_later(0.001, bad, arg)
    manual.advance(0.01)
    gc.collect()
    assert (sys.getrefcount(bad), sys.getrefcount(arg)) == base


def test_repr_of_repeating_handle_does_not_leak(manual):
    h = manual.call_every(1, print)
    repr(h)
    before = sys.getallocatedblocks()
    for _ in range(10_000):
        repr(h)
    assert sys.getallocatedblocks() - before < 1000


# ---------------------------------------------------------------------------
# garbage collection


@pytest.mark.parametrize("cls", [ManualWheel, Wheel])
def test_cycle_through_pending_callback_is_collected(cls):
    class Payload:
        pass

    w = cls()
    payload = Payload()
    payload.wheel = w
    h = w.call_later(100, lambda p=payload: p)
    ref_w, ref_p = weakref.ref(w), weakref.ref(payload)
    del w, payload
    gc.collect()
    assert ref_w() is None
    assert ref_p() is None
    assert h.cancelled()


def test_dropping_a_wheel_cancels_its_timers():
    w = ManualWheel()
    cb = Callback()
    base = sys.getrefcount(cb)
    h = w.call_later(1, cb)
    del w
    gc.collect()
    assert h.cancelled()
    assert sys.getrefcount(cb) == base
    assert math.isclose(h.when(), 1.0)


class WheelSub(Wheel):
    resurrected = []

    def __del__(self):
        if getattr(self, "resurrect", False):
            WheelSub.resurrected.append(self)
        else:
            try:  # scheduling from a finalizer: refused or cancelled, never a crash
                self.call_later(0, print, "from __del__")
            except RuntimeError:
                pass


class ManualSub(ManualWheel):
    pass


@pytest.mark.parametrize("cls", [WheelSub, ManualSub])
def test_subclasses_in_cycles_with_finalizers(cls):
    gc.collect()
    threads = threads_now()
    w = cls(0.001)
    w.me = w  # a cycle through the instance dict
    w.call_every(0.001, lambda self=w: self)  # and one through a callback
    h = w.call_later(100, print)
    ref = weakref.ref(w)
    del w
    # The weak reference dies first; a threaded wheel whose thread was starting
    # a batch at that moment is kept alive by it (CPython's resurrection rule)
    # and is collected by a later pass: wait for the handle to be cancelled.
    assert wait_for(lambda: gc.collect() is not None and ref() is None and h.cancelled())
    assert threads_back(threads)
    if cls is WheelSub:
        # resurrected by its finalizer: it still works, and dies later
        w = WheelSub()
        w.resurrect = True
        del w
        (w,) = WheelSub.resurrected
        WheelSub.resurrected.clear()
        ev = threading.Event()
        w.call_later(0, ev.set)
        assert ev.wait(5) and not w.closed
        del w
        gc.collect()
        assert threads_back(threads)
