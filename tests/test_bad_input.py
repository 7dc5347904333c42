"""Bad input (docs/explanation/guarantees.md, "Bad input"): NaN raises
ValueError, None or a non-number TypeError, a non-callable callback or a
context that is not a Context TypeError, bad keywords and arity TypeError,
and a refused call changes nothing.  Also the numbers that are accepted:
ints and floats, negative delays (the next batch, in deadline order) and inf
(never).  Each on a ManualWheel and on a threaded Wheel."""

import contextvars
import sys
import threading

import pytest

from pywheel import ManualWheel, Wheel

# ---------------------------------------------------------------------------
# bad input


BAD_NUMBERS = [
    (float("nan"), ValueError),
    (None, TypeError),
    ("1", TypeError),
    (b"1", TypeError),
    (object(), TypeError),
    ([1], TypeError),
    (1j, TypeError),
]


def assert_unchanged(w, fn, exc):
    s0, n0 = w.stats()["scheduled"], len(w)
    with pytest.raises(exc):
        fn()
    assert w.stats()["scheduled"] == s0
    assert len(w) == n0


@pytest.mark.parametrize(("value", "exc"), BAD_NUMBERS)
def test_bad_delay(anywheel, value, exc):
    anywheel.call_later(100, print)  # something pending, so "unchanged" means something
    cb = object.__new__(type("CB", (), {"__call__": lambda self: None}))
    rc = sys.getrefcount(cb)
    assert_unchanged(anywheel, lambda: anywheel.call_later(value, cb), exc)
    assert_unchanged(anywheel, lambda: anywheel.call_at(value, cb), exc)
    assert_unchanged(anywheel, lambda: anywheel.call_every(value, cb), exc)
    if value is not None:  # first=None means "first=interval"
        assert_unchanged(anywheel, lambda: anywheel.call_every(1, cb, first=value), exc)
    assert sys.getrefcount(cb) == rc


@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, float("nan"), float("inf"), -float("inf")])
def test_bad_interval(anywheel, value):
    assert_unchanged(anywheel, lambda: anywheel.call_every(value, print), ValueError)


@pytest.mark.parametrize("callback", [None, 42, "print", object()])
def test_non_callable_callback(anywheel, callback):
    assert_unchanged(anywheel, lambda: anywheel.call_later(1, callback), TypeError)
    assert_unchanged(anywheel, lambda: anywheel.call_at(1, callback), TypeError)
    assert_unchanged(anywheel, lambda: anywheel.call_every(1, callback), TypeError)


@pytest.mark.parametrize("context", [{}, 1, "ctx", object(), contextvars.ContextVar("x")])
def test_context_must_be_a_context(anywheel, context):
    arg = object()
    rc = sys.getrefcount(arg)
    assert_unchanged(
        anywheel, lambda: anywheel.call_later(1, print, arg, context=context), TypeError
    )
    assert_unchanged(anywheel, lambda: anywheel.call_at(1, print, arg, context=context), TypeError)
    assert_unchanged(
        anywheel, lambda: anywheel.call_every(1, print, arg, context=context), TypeError
    )
    assert sys.getrefcount(arg) == rc


def test_bad_keywords_and_arity(anywheel):
    w = anywheel
    assert_unchanged(w, lambda: w.call_later(1, print, bogus=1), TypeError)
    assert_unchanged(w, lambda: w.call_at(1, print, first=1), TypeError)
    assert_unchanged(w, lambda: w.call_later(1, print, first=1), TypeError)
    assert_unchanged(w, lambda: w.call_every(1, print, interval=1), TypeError)
    assert_unchanged(w, lambda: w.call_later(1), TypeError)
    assert_unchanged(w, lambda: w.call_later(), TypeError)
    assert_unchanged(w, lambda: w.call_at(), TypeError)
    assert_unchanged(w, lambda: w.call_every(1), TypeError)
    assert_unchanged(w, lambda: w.call_later(delay=1, callback=print), TypeError)


@pytest.mark.parametrize("cls", [Wheel, ManualWheel])
@pytest.mark.parametrize(
    ("tick", "exc"),
    [
        (0, ValueError),
        (0.0, ValueError),
        (-0.001, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (None, TypeError),
        ("0.001", TypeError),
    ],
)
def test_bad_tick(cls, tick, exc):
    with pytest.raises(exc):
        cls(tick=tick)
    with pytest.raises(exc):
        cls(tick)


def test_bad_constructor_keywords():
    with pytest.raises(TypeError):
        Wheel(bogus=1)
    with pytest.raises(TypeError):
        Wheel(start=1.0)  # only ManualWheel has a start
    with pytest.raises(TypeError):
        ManualWheel(bogus=1)
    with pytest.raises(TypeError):
        ManualWheel(0.001, 1.0)  # start is keyword-only
    with pytest.raises(ValueError):
        ManualWheel(start=-1)
    with pytest.raises(ValueError):
        ManualWheel(start=float("nan"))


def test_int_and_float_delays_are_accepted(manual):
    import decimal
    import fractions

    hs = [
        manual.call_later(1, print),
        manual.call_later(True, print),
        manual.call_later(fractions.Fraction(1, 1), print),
        manual.call_later(decimal.Decimal("1"), print),
        manual.call_later(1.0, print),
    ]
    assert [h.when() for h in hs] == [1.0] * 5
    for h in hs:
        h.cancel()


def test_negative_delay_runs_in_next_batch_ordered_by_deadline():
    w = ManualWheel(tick=0.001, start=10.0)
    ran = []
    w.call_later(0.002, ran.append, "future")
    w.call_later(-1, ran.append, "-1")
    w.call_later(0, ran.append, "0")
    w.call_later(-2, ran.append, "-2")
    w.call_at(-5, ran.append, "at -5")
    w.call_later(-float("inf"), ran.append, "-inf")
    w.call_later(-1, ran.append, "-1 again")
    assert w.advance(0) == 6
    assert ran == ["-inf", "at -5", "-2", "-1", "-1 again", "0"]
    assert w.time() == 10.0
    w.advance(0.002)
    assert ran[-1] == "future"
    w.close()


def test_negative_delay_threaded(wheel):
    # Scheduled from a callback, so that the thread cannot collect the first
    # before the others exist: all three go into the next batch together.
    done = threading.Event()
    ran = []

    def schedule():
        wheel.call_later(-0.5, ran.append, "-0.5")
        wheel.call_later(0, ran.append, "0")
        wheel.call_later(-1, ran.append, "-1")
        wheel.call_later(0.01, done.set)

    wheel.call_later(0, schedule)
    assert done.wait(5)
    assert ran == ["-1", "-0.5", "0"]


@pytest.mark.parametrize("how", ["call_later", "call_at"])
def test_infinite_delay_never_runs(manual, how):
    # (a finite delay beyond the clock's range is refused: tests/test_time_range.py)
    ran = []
    if how == "call_later":
        h = manual.call_later(float("inf"), ran.append, 1)
    else:
        h = manual.call_at(float("inf"), ran.append, 1)
    assert h.when() == float("inf")
    assert len(manual) == 1
    assert manual.stats()["pending"] == 1
    assert manual.next_deadline() is None
    assert manual.advance(1e9) == 0
    assert manual.advance_to_next() == 0
    assert ran == []
    assert len(manual) == 1
    assert not h.cancelled()
    if how == "call_at":
        assert manual.close() == [h]
    else:
        assert h.cancel() is True
        assert len(manual) == 0
    assert h.cancelled()


def test_infinite_delay_threaded(wheel):
    h = wheel.call_later(float("inf"), print, "never")
    assert len(wheel) == 1
    assert wheel.close() == [h]
    assert h.cancelled()
