"""Every number type meets the clock's range the same way: a finite time
out of range raises OverflowError naming the limit, whatever carries it
(Decimal's __float__ says inf for Decimal('1e400'), which is finite); only a
number equal to infinity means never (or the past).  And the top of the range
is reached by advancing: the last tick, whose boundary lies past 2**63 ns,
runs its timers at their exact deadlines."""

import asyncio
import fractions
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from helpers import IndexOnly

import pywheel
from pywheel import ManualWheel
from pywheel.asyncio import WheelEventLoop

HUGE = [Decimal("1e400"), Decimal("-1e400"), 10**400, -(10**400), Fraction(10**400, 3)]


class FloatOnly:
    """A number type of its own: finite, but its float() overflows."""

    def __init__(self, sign):
        self.sign = sign

    def __float__(self):
        return self.sign * math.inf


def _entry_points(value):
    w = pywheel.ManualWheel()
    h = w.call_later(10, print)
    return (
        {
            "call_later": lambda: w.call_later(value, print),
            "call_at": lambda: w.call_at(value, print),
            "call_every interval": lambda: w.call_every(value, print),
            "call_every first": lambda: w.call_every(1, print, first=value),
            "reschedule": lambda: h.reschedule(value),
            "reschedule_later": lambda: h.reschedule_later(value),
            "ManualWheel start": lambda: pywheel.ManualWheel(start=value),
            "ManualWheel tick": lambda: pywheel.ManualWheel(tick=value),
            "advance": lambda: w.advance(value),
            "advance_to": lambda: w.advance_to(value),
            "run_due": lambda: w.run_due(value),
            "collect_due": lambda: w.collect_due(value),
            "Wheel tick": lambda: pywheel.Wheel(tick=value),
        },
        w,
        h,
    )


@pytest.mark.parametrize("value", HUGE + [FloatOnly(1), FloatOnly(-1)], ids=repr)
def test_a_finite_time_out_of_range_raises_overflow_error_everywhere(value):
    calls, w, h = _entry_points(value)
    for name, call in calls.items():
        if name in ("advance", "advance_to", "run_due", "collect_due", "ManualWheel start") and (
            value in (Decimal("-1e400"), -(10**400))
            or (isinstance(value, FloatOnly) and value.sign < 0)
        ):
            continue  # backwards or negative: refused for that reason first
        if name in ("ManualWheel tick", "Wheel tick", "call_every interval") and (
            (isinstance(value, FloatOnly) and value.sign < 0)
            or value in (Decimal("-1e400"), -(10**400))
        ):
            continue  # not positive: ValueError, as for any negative
        with pytest.raises(OverflowError, match="beyond the clock's range"):
            call()
    assert len(w) == 1 and h.when() == 10.0  # nothing changed
    w.close()


def test_decimal_infinity_still_means_never():
    w = pywheel.ManualWheel()
    assert w.call_later(Decimal("Infinity"), print).when() == math.inf
    assert w.call_at(Decimal("-Infinity"), print).when() == -math.inf
    with pytest.raises(ValueError):
        w.call_every(Decimal("Infinity"), print)
    with pytest.raises(ValueError):
        pywheel.ManualWheel(start=Decimal("Infinity"))
    w.close()


@pytest.mark.parametrize("value", [Decimal("1e400"), 10**400], ids=repr)
def test_the_loop_waits_for_an_out_of_range_deadline_as_the_stock_loop(value):
    for factory in (asyncio.SelectorEventLoop, WheelEventLoop):
        loop = factory()
        try:
            ran = []  # (call_later adds time(): a TypeError or OverflowError on both)
            loop.call_at(value, ran.append, "at")
            loop.call_at(-value, ran.append, "past")
            loop.run_until_complete(asyncio.sleep(0.01))
            assert ran == ["past"], factory
        finally:
            loop.close()


def test_close_timeout_beyond_the_range_is_no_limit():
    w = pywheel.Wheel()
    assert w.close(timeout=Decimal("1e400")) == []


# ---- the top of the range ---------------------------------------------------

TOP = (2**63 - 2) / 10**9  # the last nanosecond, in seconds


@pytest.mark.parametrize("tick", [1e-9, 7e-9, 1e-6, 0.001, 0.1, 1.0, 3.0])
@pytest.mark.parametrize(
    "when", [9223372036.854774, 9223372036, TOP, 9223372036.5], ids=lambda x: repr(x)
)
def test_a_deadline_at_the_top_of_the_range_is_reached_by_advancing(tick, when):
    for how in ("advance_to", "advance_to_next"):
        w = pywheel.ManualWheel(tick=tick, start=9223372030)
        ran = []
        h = w.call_at(when, ran.append, 1)
        assert len(w) == 1
        nxt = w.next_deadline()
        assert nxt is not None and nxt >= h.when()
        assert w.next_when() == h.when()
        if how == "advance_to":
            assert w.advance_to(nxt) == 1
        else:
            assert w.advance_to_next() == 1
        assert ran == [1] and len(w) == 0 and w.time() >= h.when()
        assert w.next_deadline() is None
        w.close()


@pytest.mark.parametrize("tick", [0.001, 1.0, 3.0])
def test_advancing_to_a_top_deadline_itself_runs_it(tick):
    w = pywheel.ManualWheel(tick=tick, start=9223372030)
    ran = []
    h = w.call_at(9223372036.854774, ran.append, 1)
    assert w.advance_to(math.nextafter(h.when(), 0)) == 0  # never early
    assert w.advance_to(h.when()) == 1 and ran == [1]
    w.close()


# These numbers are beyond a float's range but are numbers: like a huge int
# they are beyond the clock's range and refused with OverflowError wherever
# a time is expected (they meant "never" before issue 9; inf still does).
HUGE_FRACTION_OR_INDEX = [
    (fractions.Fraction(10**400), 1),
    (IndexOnly(10**400), 1),
    (-fractions.Fraction(10**400), -1),
    (IndexOnly(-(10**400)), -1),
]


@pytest.mark.parametrize(
    ("value", "sign"), HUGE_FRACTION_OR_INDEX, ids=["Fraction", "index", "-Fraction", "-index"]
)
def test_huge_fraction_or_index_is_refused_like_a_huge_int(value, sign):
    w = ManualWheel(start=10)
    for v in (sign * 10**400, value):  # the int reference, then the others
        with pytest.raises(OverflowError, match="beyond the clock's range"):
            w.call_later(v, print)
        with pytest.raises(OverflowError, match="beyond the clock's range"):
            w.call_at(v, print)
        with pytest.raises(OverflowError):
            w.call_every(v, print)
        with pytest.raises(OverflowError):
            ManualWheel(tick=v)
    assert len(w) == 0 and w.stats()["scheduled"] == 0
    w.close()
