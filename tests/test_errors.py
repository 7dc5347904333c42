"""Errors (docs/explanation/guarantees.md: "Errors";
"Exceptions of every kind"): an exception in a callback never stops the
wheel.  It goes to the exception handler (the default one logs on the
"pywheel" logger); a handler that raises is reported, and when the default
handler fails too the error reaches sys.unraisablehook.  On a ManualWheel a
KeyboardInterrupt, SystemExit or other BaseException propagates out of
advance() and leaves the rest pending; a repeating timer that raises keeps
its cadence."""

import logging
import sys
import threading

import pytest
from helpers import (
    Recorder,
    conserved,
    raiser,
    wait_for,
)
from hypothesis import given, note, settings
from hypothesis import strategies as st

from pywheel import ManualWheel, Wheel

# ---------------------------------------------------------------------------
# exceptions


def test_exception_goes_to_handler_and_wheel_goes_on(manual):
    calls = []
    manual.set_exception_handler(lambda w, ctx: calls.append((w, ctx)))
    ran = []
    exc = ValueError("boom")

    def bad():
        raise exc

    h = manual.call_at(0.001, bad)
    manual.call_at(0.001, ran.append, "same batch")
    manual.call_at(0.002, ran.append, "next batch")
    assert manual.advance(0.01) == 3
    assert ran == ["same batch", "next batch"]
    assert len(calls) == 1
    w, ctx = calls[0]
    assert w is manual
    assert ctx["message"] == "Exception in timer callback"
    assert ctx["exception"] is exc
    assert ctx["handle"] is h
    assert exc.__traceback__ is not None
    s = manual.stats()
    assert s["errors"] == 1
    assert s["fired"] == 3


def test_exception_threaded(wheel):
    calls = []
    got = threading.Event()

    def handler(w, ctx):
        calls.append((w, ctx, threading.get_ident()))

    wheel.set_exception_handler(handler)

    def bad():
        raise KeyError("k")

    h = wheel.call_later(0.005, bad)
    wheel.call_later(0.02, got.set)
    assert got.wait(5)
    assert len(calls) == 1
    w, ctx, ident = calls[0]
    assert w is wheel
    assert ident != threading.get_ident()
    assert isinstance(ctx["exception"], KeyError)
    assert ctx["handle"] is h
    assert wheel.stats()["errors"] == 1


def test_default_handler_logs_on_pywheel_logger(manual, caplog):
    assert manual.get_exception_handler() is None

    def bad():
        raise ZeroDivisionError("nope")

    h = manual.call_at(0.001, bad)
    with caplog.at_level(logging.ERROR, logger="pywheel"):
        manual.advance(0.01)
    records = [r for r in caplog.records if r.name == "pywheel"]
    assert len(records) == 1
    rec = records[0]
    assert rec.levelno == logging.ERROR
    assert "Exception in timer callback" in rec.getMessage()
    assert repr(h) in rec.getMessage()  # other context keys are listed
    assert rec.exc_info[0] is ZeroDivisionError
    assert str(rec.exc_info[1]) == "nope"


def test_default_exception_handler_method_logs(manual, caplog):
    exc = RuntimeError("direct")
    with caplog.at_level(logging.ERROR, logger="pywheel"):
        manual.default_exception_handler({"message": "hello", "exception": exc, "extra": 42})
    (rec,) = [r for r in caplog.records if r.name == "pywheel"]
    assert rec.getMessage().startswith("hello")
    assert "extra: 42" in rec.getMessage()
    assert rec.exc_info[1] is exc


def test_raising_handler_is_reported_by_default_handler(manual, caplog):
    handler_exc = TypeError("handler broke")
    contexts = []

    def handler(w, ctx):
        contexts.append(ctx)
        raise handler_exc

    manual.set_exception_handler(handler)
    ran = []

    def bad():
        raise ValueError("cb broke")

    manual.call_at(0.001, bad)
    manual.call_at(0.002, ran.append, "still runs")
    with caplog.at_level(logging.ERROR, logger="pywheel"):
        assert manual.advance(0.01) == 2
    assert ran == ["still runs"]
    assert len(contexts) == 1
    (rec,) = [r for r in caplog.records if r.name == "pywheel"]
    assert rec.getMessage().startswith("Unhandled error in exception handler")
    assert rec.exc_info[1] is handler_exc
    assert manual.stats()["errors"] == 1


def test_get_set_exception_handler(manual):
    def handler(w, ctx):
        pass

    assert manual.get_exception_handler() is None
    assert manual.set_exception_handler(handler) is None
    assert manual.get_exception_handler() is handler
    with pytest.raises(TypeError):
        manual.set_exception_handler(42)
    assert manual.get_exception_handler() is handler  # unchanged by the rejected call
    manual.set_exception_handler(None)
    assert manual.get_exception_handler() is None


def test_call_exception_handler(manual, caplog):
    calls = []
    manual.set_exception_handler(lambda w, ctx: calls.append((w, ctx)))
    ctx = {"message": "custom", "value": 1}
    assert manual.call_exception_handler(ctx) is None
    assert calls == [(manual, ctx)]
    with pytest.raises(TypeError):
        manual.call_exception_handler(["not", "a", "dict"])
    manual.set_exception_handler(None)
    with caplog.at_level(logging.ERROR, logger="pywheel"):
        manual.call_exception_handler({"message": "to the log"})
    assert [r.getMessage() for r in caplog.records if r.name == "pywheel"] == ["to the log"]
    assert manual.stats()["errors"] == 0  # only callback errors are counted


def test_advancing_from_own_callback_is_reported(manual):
    calls = []
    manual.set_exception_handler(lambda w, ctx: calls.append(ctx))
    ran = []
    manual.call_at(0.001, lambda: manual.advance(1))
    manual.call_at(0.001, lambda: manual.advance_to(5))
    manual.call_at(0.001, manual.advance_to_next)
    manual.call_at(0.002, lambda: ran.append(manual.time_ns()))
    assert manual.advance(0.01) == 4
    assert ran == [2_000_000]  # time did not move under the advance
    assert manual.time_ns() == 10_000_000
    assert len(calls) == 3
    for ctx in calls:
        assert isinstance(ctx["exception"], RuntimeError)
        assert "own callback" in str(ctx["exception"])
    assert manual.stats()["errors"] == 3


def test_base_exception_in_manual_callback_propagates_and_keeps_the_rest(manual):
    ran = []

    def interrupt():
        raise KeyboardInterrupt

    manual.call_at(0.001, ran.append, "before")
    manual.call_at(0.001, interrupt)
    manual.call_at(0.001, ran.append, "after")
    manual.call_at(0.002, ran.append, "later")
    with pytest.raises(KeyboardInterrupt):
        manual.advance(0.01)
    assert ran == ["before"]
    assert len(manual) == 2
    manual.advance(0.01)
    assert ran == ["before", "after", "later"]
    assert conserved(manual)


# ===========================================================================
# 5. Faults: every kind of exception, raising handlers, allocation failure,
#    Ctrl-C during close()
# ===========================================================================


class CustomBase(BaseException):
    pass


class BadStr(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")

    def __repr__(self):
        raise RuntimeError("no repr for you")


def _deep(n=0):
    return _deep(n + 1)


RAISERS = {
    "ValueError": lambda: (_ for _ in ()).throw(ValueError("v")),
    "ZeroDivisionError": lambda: 1 / 0,
    "StopIteration": lambda: next(iter(())),
    "MemoryError": lambda: (_ for _ in ()).throw(MemoryError()),
    "RecursionError": _deep,
    "BadStr": lambda: (_ for _ in ()).throw(BadStr()),
    "KeyboardInterrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "SystemExit": lambda: sys.exit(3),
    "GeneratorExit": lambda: (_ for _ in ()).throw(GeneratorExit()),
    "CustomBase": lambda: (_ for _ in ()).throw(CustomBase()),
}
EXC_TYPES = {
    "ValueError": ValueError,
    "ZeroDivisionError": ZeroDivisionError,
    "StopIteration": StopIteration,
    "MemoryError": MemoryError,
    "RecursionError": RecursionError,
    "BadStr": BadStr,
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "CustomBase": CustomBase,
}


@pytest.mark.parametrize("kind", list(RAISERS))
def test_threaded_callback_raising_anything_is_reported_and_the_wheel_goes_on(kind):
    # On a threaded wheel there is no caller to give an exception to: every
    # kind, KeyboardInterrupt and SystemExit included, goes to the handler
    # (docs/explanation/guarantees.md, "Errors") and the wheel -- and the process -- carry on.
    rec = Recorder()
    with Wheel() as w:
        w.set_exception_handler(rec)
        after = threading.Event()
        repeat_runs = []

        def repeating():
            repeat_runs.append(1)
            if len(repeat_runs) <= 3:
                RAISERS[kind]()

        h = w.call_later(0.001, RAISERS[kind])
        r = w.call_every(0.002, repeating)
        w.call_later(0.002, after.set)
        assert after.wait(5)
        assert wait_for(lambda: len(repeat_runs) >= 5), "the repeating timer stopped"
        r.cancel()
        assert wait_for(lambda: len(rec.contexts) == 4)
        assert rec.types() == [EXC_TYPES[kind]] * 4
        first = rec.contexts[0]
        assert first["handle"] is h
        assert first["message"] == "Exception in timer callback"
        assert w.stats()["errors"] == 4
        assert not w.closed
        assert conserved(w)


NOT_EXCEPTIONS = ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "CustomBase"]


@pytest.mark.parametrize("kind", NOT_EXCEPTIONS)
def test_manual_base_exception_propagates_and_keeps_the_rest_pending(kind):
    # docs/explanation/guarantees.md, "Errors": on a ManualWheel they propagate
    # out of advance(), leaving the unrun timers pending in their places.  A
    # repeating timer that raised one is re-armed and keeps its cadence.
    w = ManualWheel()
    ran = []

    def repeating():
        ran.append(("r", w.time_ns()))
        if w.time_ns() == 2_000_000:
            RAISERS[kind]()

    r = w.call_every(0.001, repeating)
    w.call_at(0.002, ran.append, ("before", 2))  # equal deadline, scheduled before r's re-arm
    w.call_at(0.002, lambda: None)
    w.call_at(0.002, ran.append, ("after", 2))  # same tick, scheduled before r's re-arm
    w.call_at(0.0025, ran.append, ("later", 3))
    # runs after r's first run, so it schedules behind r's re-arm: same batch, after r
    w.call_at(0.001, lambda: w.call_at(0.002, ran.append, ("behind r", 2)))
    with pytest.raises(EXC_TYPES[kind]):
        w.advance(0.01)
    assert ran == [("r", 1_000_000), ("before", 2), ("after", 2), ("r", 2_000_000)]
    assert w.time_ns() == 2_000_000, "time stopped where the exception was raised"
    assert len(w) == 3 and conserved(w)  # behind r, later, and r re-armed
    assert w.advance(0.002) == 4
    assert ran[4:] == [("behind r", 2), ("later", 3), ("r", 3_000_000), ("r", 4_000_000)]
    assert r.when() == pytest.approx(0.005)
    assert w.stats()["errors"] == 0
    r.cancel()
    assert conserved(w)


timer_plans = st.lists(
    st.tuples(
        st.integers(0, 30),  # deadline, ms
        st.sampled_from(["plain", "interrupt", "cancel-other", "spawn", "every"]),
        st.integers(0, 40),  # the other timer, or the spawn delay / interval in ms
    ),
    min_size=1,
    max_size=30,
)


def _run_plan(plan, interrupt: bool):
    """Runs a plan on a ManualWheel to t=40 ms in 5 ms advances.  With
    interrupt, the 'interrupt' timers raise KeyboardInterrupt out of advance()
    and the test advances again to the same target.  Returns the run log."""
    w = ManualWheel()
    log = []
    handles = []
    raised = [0]

    def make(i, kind, arg):
        def cb():
            log.append((i, w.time_ns()))
            if kind == "cancel-other" and handles:
                handles[arg % len(handles)].cancel()
            elif kind == "spawn" and len(log) < 200:
                w.call_later(arg / 1000, log.append, (f"child of {i}", "spawned"))
            elif kind == "interrupt" and interrupt:
                raised[0] += 1
                raise KeyboardInterrupt

        return cb

    for i, (when, kind, arg) in enumerate(plan):
        if kind == "every":
            handles.append(w.call_every((arg + 1) / 1000, make(i, kind, arg), first=when / 1000))
        else:
            handles.append(w.call_at(when / 1000, make(i, kind, arg)))
    for step in range(1, 9):
        target = step * 0.005
        for _ in range(1000):
            try:
                w.advance_to(target)
                break
            except KeyboardInterrupt:
                assert conserved(w)
                assert w.time() <= target
    assert conserved(w)
    w.close()
    return log, raised[0]


@settings(max_examples=100, deadline=None)
@given(plan=timer_plans)
def test_manual_interruptions_change_nothing_but_where_advance_returns(plan):
    # A KeyboardInterrupt out of advance() leaves every unrun timer in its
    # place: advancing again gives exactly the runs, order and times of a run
    # that was never interrupted.
    calm, _ = _run_plan(plan, interrupt=False)
    stormy, raised = _run_plan(plan, interrupt=True)
    note(f"raised {raised} times")
    assert stormy == calm


@pytest.mark.parametrize("kind", ["ValueError", "RecursionError", "BadStr", "MemoryError"])
def test_manual_exception_goes_to_handler(kind):
    rec = Recorder()
    w = ManualWheel()
    w.set_exception_handler(rec)
    ran = []
    w.call_at(0.001, RAISERS[kind])
    w.call_at(0.001, ran.append, 1)
    assert w.advance(0.01) == 2
    assert ran == [1]
    assert rec.types() == [EXC_TYPES[kind]]


@pytest.mark.parametrize("raised", ["ValueError", "KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("kind", ["manual", "threaded"])
def test_raising_exception_handler_is_reported_and_the_wheel_goes_on(kind, raised, pywheel_log):
    calls = []

    def handler(wheel, context):
        calls.append(context)
        RAISERS[raised]()

    w = ManualWheel() if kind == "manual" else Wheel()
    try:
        w.set_exception_handler(handler)
        done = threading.Event()
        w.call_at(w.time() + 0.001, raiser, "x")
        w.call_at(w.time() + 0.002, done.set)
        if kind == "manual":
            assert w.advance(0.01) == 2  # nothing propagates, not even KeyboardInterrupt
        assert done.wait(5)
        assert wait_for(lambda: len(pywheel_log) == 1)
        (rec,) = pywheel_log
        assert rec.getMessage().startswith("Unhandled error in exception handler")
        assert isinstance(rec.exc_info[1], EXC_TYPES[raised])
        assert len(calls) == 1 and isinstance(calls[0]["exception"], ValueError)
        assert w.stats()["errors"] == 1
        assert not w.closed
    finally:
        w.close()


def test_handler_and_default_handler_both_failing_go_to_unraisable(unraisable):
    logger = logging.getLogger("pywheel")

    def broken_error(*args, **kwargs):
        raise RuntimeError("logging is broken")

    def handler(wheel, context):
        raise ValueError("handler is broken")

    w = ManualWheel()
    w.set_exception_handler(handler)
    ran = []
    logger.error = broken_error
    try:
        w.call_at(0.001, raiser, "x")
        w.call_at(0.002, ran.append, "still runs")
        assert w.advance(0.01) == 2
    finally:
        del logger.error
    assert ran == ["still runs"]
    assert len(unraisable) == 1
    assert unraisable[0][0] is RuntimeError


def test_callback_whose_repr_raises_and_that_raises(unraisable, pywheel_log):
    # The default handler formats the handle, which formats the callback: a
    # callback whose repr raises must not break the wheel.
    class Nasty:
        def __repr__(self):
            raise RuntimeError("repr")

        def __call__(self):
            raise ValueError("call")

    for kind in ("manual", "threaded"):
        w = ManualWheel() if kind == "manual" else Wheel()
        done = threading.Event()
        h = w.call_at(w.time() + 0.001, Nasty())
        w.call_at(w.time() + 0.002, done.set)
        if kind == "manual":
            assert w.advance(0.01) == 2
        assert done.wait(5)
        assert not h.cancelled()
        assert w.stats()["errors"] == 1
        with pytest.raises(RuntimeError):
            repr(w.call_later(10, Nasty()))  # the repr really raises
        w.close()
    assert len(unraisable) + len(pywheel_log) == 2


def test_repeating_timer_raising_on_some_runs_keeps_its_cadence_manual():
    rec = Recorder()
    w = ManualWheel()
    w.set_exception_handler(rec)
    times = []

    def cb():
        times.append(w.time_ns())
        if len(times) % 3 == 0:
            raise ValueError(len(times))

    r = w.call_every(0.0025, cb, first=0.001)
    assert w.advance(0.1) == 40
    assert times == [-(-(1_000_000 + 2_500_000 * k) // 1_000_000) * 1_000_000 for k in range(40)]
    assert [c["exception"].args[0] for c in rec.contexts] == list(range(3, 41, 3))
    assert w.stats()["skipped_runs"] == 0
    assert not r.cancelled()
    r.cancel()


def test_repeating_timer_raising_on_some_runs_keeps_its_cadence_threaded():
    interval_ns = 10_000_000
    rec = Recorder()
    with Wheel() as w:
        w.set_exception_handler(rec)
        whens = []
        done = threading.Event()

        def cb():
            whens.append(round(r.when() * 1e9))
            if len(whens) % 2:
                raise KeyError(len(whens))
            if len(whens) >= 10:
                r.cancel()
                done.set()

        r = w.call_every(interval_ns / 1e9, cb)
        first = round(r.when() * 1e9)
        assert done.wait(10)
        assert all((x - first) % interval_ns == 0 for x in whens), "drifted off the grid"
        steps = [(b - a) // interval_ns for a, b in zip(whens, whens[1:], strict=False)]
        assert all(s >= 1 for s in steps)
        assert sum(s - 1 for s in steps) == w.stats()["skipped_runs"]
        assert len(rec.contexts) == 5
