"""Out of memory (docs/explanation/guarantees.md, "Memory"): scheduling that
cannot allocate raises MemoryError and changes nothing.  Through the C test
hook (_fail_alloc_after, skipped without it) at every allocation point,
against a model; and through CPython's own allocator faults (_testcapi) in a
child interpreter."""

import collections
import contextvars
import sys
import threading

import pytest
from helpers import (
    Callback,
    conserved,
    run_script,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import pywheel
from pywheel import ManualWheel, Wheel

# ---- allocation failure (the C test hook) -----------------------------------

fail_alloc = getattr(pywheel._core, "_fail_alloc_after", None)
needs_alloc_hook = pytest.mark.skipif(
    not hasattr(pywheel._core, "_fail_alloc_after"),
    reason="pywheel._core._fail_alloc_after is not built in",
)


def _schedule(w, method, cb, arg, ctx):
    if method == "call_later":
        return w.call_later(0.01, cb, arg, context=ctx)
    if method == "call_at":
        return w.call_at(w.time() + 0.01, cb, arg, context=ctx)
    return w.call_every(0.01, cb, arg, context=ctx)


@needs_alloc_hook
@pytest.mark.parametrize("method", ["call_later", "call_at", "call_every"])
@pytest.mark.parametrize("kind", ["manual", "threaded"])
def test_allocation_failure_gives_memoryerror_and_changes_nothing(kind, method):
    w = ManualWheel() if kind == "manual" else Wheel()
    try:
        ran = []
        cb, arg, ctx = Callback(), object(), contextvars.copy_context()
        keep = w.call_later(5, ran.append, "pending before")
        base_refs = [sys.getrefcount(x) for x in (cb, arg, ctx)]
        s0, n0 = w.stats(), len(w)
        fail_alloc(1)
        with pytest.raises(MemoryError):
            _schedule(w, method, cb, arg, ctx)
        s1 = w.stats()
        for key in ("scheduled", "fired", "cancelled", "pending", "errors"):
            assert s1[key] == s0[key], key
        assert len(w) == n0
        assert [sys.getrefcount(x) for x in (cb, arg, ctx)] == base_refs
        assert not keep.cancelled()
        # the very next allocation succeeds and the wheel works
        done = threading.Event()
        h = _schedule(w, method, lambda *a: (ran.append("after"), done.set()), arg, ctx)
        if kind == "manual":
            w.advance(0.02)
        assert done.wait(5)
        if method == "call_every":
            h.cancel()
        assert ran[0] == "after"
        assert conserved(w)
    finally:
        fail_alloc(0)
        w.close()


@needs_alloc_hook
def test_allocation_failure_counts_and_disables():
    w = ManualWheel()
    noop = Callback()
    try:
        fail_alloc(3)
        a = w.call_later(1, noop)
        b = w.call_every(1, noop)
        with pytest.raises(MemoryError):
            w.call_at(1, noop)
        c = w.call_later(1, noop)  # the countdown is spent
        assert len(w) == 3 and conserved(w)
        fail_alloc(2)
        fail_alloc(0)  # disabled again
        for _ in range(10):
            w.call_later(1, noop)
        assert len(w) == 13
        assert w.advance(1) == 13
        assert len(w) == 1  # b, re-armed
        assert not any(h.cancelled() for h in (a, b, c))
        b.cancel()
        assert conserved(w)
    finally:
        fail_alloc(0)
        w.close()


@needs_alloc_hook
@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["call_later", "call_at", "call_every", "cancel", "advance"]),
            st.integers(0, 6),
        ),
        max_size=40,
    )
)
def test_allocation_failure_anywhere_keeps_the_model(ops):
    # Failing allocations at arbitrary points leave the wheel exactly as a
    # model that skips the failed calls says it is.
    w = ManualWheel()
    fired = collections.Counter()
    model = {}  # id -> (handle, repeating)
    n_ok = 0
    try:
        for op, k in ops:
            if op in ("call_later", "call_at", "call_every"):
                fail_alloc(k)  # k == 0: disabled; k == 1: this one fails
                i = n_ok
                try:
                    if op == "call_later":
                        h = w.call_later(0.001 * k, fired.__setitem__, i, 1)
                    elif op == "call_at":
                        h = w.call_at(w.time() + 0.001 * k, fired.__setitem__, i, 1)
                    else:
                        h = w.call_every(0.001 * (k + 1), fired.update, [i])
                except MemoryError:
                    assert k == 1
                    continue
                finally:
                    fail_alloc(0)
                assert k != 1
                n_ok += 1
                model[i] = (h, op == "call_every")
            elif op == "cancel" and model:
                i = sorted(model)[k % len(model)]
                h, _ = model.pop(i)
                h.cancel()
            elif op == "advance":
                w.advance(0.001 * k)
                for i in [i for i, (h, rep) in model.items() if not rep and fired[i]]:
                    del model[i]
            assert len(w) == len(model)
            assert conserved(w)
    finally:
        fail_alloc(0)
        w.close()


REAL_OOM_SCRIPT = """
import _testcapi, contextvars, gc, sys, pywheel

class CB:
    def __call__(self, *a):
        pass

cb, arg = CB(), object()
# CPython 3.11 itself crashes if creating a thread's first context fails
# (context_new_empty): make sure this thread has one before failing anything.
contextvars.ContextVar("x").set(1)
problems = []
for op in ["call_later", "call_every", "call_at_ctx", "close", "cancel", "advance",
           "stats", "repr", "ManualWheel", "Wheel"]:
    for n in range(30):
        w = pywheel.ManualWheel()
        w.set_exception_handler(lambda wheel, context: None)
        pend = [w.call_later(5, cb, arg) for _ in range(3)]
        base = (sys.getrefcount(cb), sys.getrefcount(arg))
        s0, n0 = w.stats(), len(w)
        r, failed = None, False
        _testcapi.set_nomemory(n, n + 1)  # only the n-th allocation from here fails
        try:
            if op == "call_later":
                r = w.call_later(1, cb, arg)
            elif op == "call_every":
                r = w.call_every(1, cb, arg)
            elif op == "call_at_ctx":
                r = w.call_at(1, cb, arg, context=contextvars.copy_context())
            elif op == "close":
                r = w.close()
            elif op == "cancel":
                r = pend[0].cancel()
            elif op == "advance":
                r = w.advance(5)
            elif op == "stats":
                r = w.stats()
            elif op == "repr":
                r = repr(pend[0])
            elif op == "ManualWheel":
                r = pywheel.ManualWheel()
            else:
                r = pywheel.Wheel()
        except MemoryError:
            failed = True
        finally:
            _testcapi.remove_mem_hooks()
        s = w.stats()
        if s["scheduled"] != s["fired"] + s["cancelled"] + s["pending"] or len(w) != s["pending"]:
            problems.append((op, n, "counters", s))
        if failed and op.startswith("call") and (len(w) != n0 or s["scheduled"] != s0["scheduled"]):
            problems.append((op, n, "a failed call changed the wheel"))
        if op == "close" and not (w.closed and all(h.cancelled() for h in pend)):
            problems.append((op, n, "close() left timers pending"))
        if op.startswith("call") and r is not None:
            r.cancel()
        if op == "Wheel" and r is not None:
            r.close()
        released = {"close": 3, "advance": 3, "cancel": 1}.get(op, 0)
        if failed and op == "cancel":
            released = 1 if pend[0].cancelled() else 0
        del r
        now = (sys.getrefcount(cb), sys.getrefcount(arg))
        if now != (base[0] - released, base[1] - released):
            problems.append((op, n, "refcounts", base, now, released))
        w.close()
print(problems)
"""


@pytest.mark.skipif(
    not hasattr(sys, "getrefcount")
    or __import__("importlib.util").util.find_spec("_testcapi") is None,
    reason="needs CPython's _testcapi",
)
def test_real_allocation_failures_at_every_point():
    # CPython's own fault injection (_testcapi.set_nomemory) fails the n-th
    # allocation, for every n through each operation: each either succeeds or
    # raises MemoryError, and the wheel, its counters and every reference
    # count stay consistent.  In a subprocess: the interpreter is fragile here.
    proc = run_script(REAL_OOM_SCRIPT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"
