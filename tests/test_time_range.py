"""The clock's range: every time is an int64 count of nanoseconds.

Finite times beyond |t| < 2**63 ns (about 9223372036.85 s, 292 years) are
refused with OverflowError naming the limit, ints and floats alike; inf means
never and -inf the past (issue 9, finding 4)."""

import fractions
import math

import pytest

from pywheel import ManualWheel, Wheel

LIMIT_S = 9223372036  # the largest integral number of seconds in range
MSG = "beyond the clock's range"


@pytest.mark.parametrize("value", [LIMIT_S, float(LIMIT_S), 9223372036.85, -float(LIMIT_S)])
def test_the_edge_of_the_range_is_kept_exactly(value):
    w = ManualWheel()
    h = w.call_at(value, print)
    assert h.when() == float(value) and math.isfinite(h.when())
    assert h._when == h.when()
    w.close()


@pytest.mark.parametrize(
    "value",
    [LIMIT_S + 1, float(LIMIT_S + 1), 9.3e9, 1e300, 10**400, fractions.Fraction(10**400)],
    ids=["int", "float", "9.3e9", "1e300", "10**400", "Fraction"],
)
def test_a_finite_time_beyond_the_range_is_refused_everywhere(value):
    w = ManualWheel()
    for call in (w.call_at, w.call_later, w.call_every):
        with pytest.raises(OverflowError, match=MSG):
            call(value, print)
        with pytest.raises(OverflowError, match=MSG):
            call(-value, print) if call is not w.call_every else w.call_at(-value, print)
    with pytest.raises(OverflowError, match=MSG):
        w.call_every(1, print, first=value)
    with pytest.raises(OverflowError, match=MSG):
        w.advance(value)
    with pytest.raises(OverflowError, match=MSG):
        w.advance_to(value)
    with pytest.raises(OverflowError, match=MSG):
        w.run_due(value)
    with pytest.raises(OverflowError, match=MSG):
        ManualWheel(tick=value)
    with pytest.raises(OverflowError, match=MSG):
        ManualWheel(start=value)
    # a rejected call changes nothing
    assert len(w) == 0 and w.stats()["scheduled"] == 0 and w.time() == 0.0
    w.close()


def test_ints_and_floats_agree_on_the_boundary():
    w = ManualWheel()
    for v in (LIMIT_S, LIMIT_S + 1, -LIMIT_S, -LIMIT_S - 1):
        outcomes = []
        for x in (v, float(v)):
            try:
                outcomes.append(w.call_at(x, print).when())
            except OverflowError:
                outcomes.append("overflow")
        assert outcomes[0] == outcomes[1], v
    w.close()


def test_a_sum_that_leaves_the_range_is_refused():
    w = ManualWheel(start=10.0)
    with pytest.raises(OverflowError, match=MSG):
        w.call_later(LIMIT_S, print)  # 10 + LIMIT_S is out of range
    w.call_later(LIMIT_S - 10, print)  # just in
    w.advance(1.0)
    with pytest.raises(OverflowError, match=MSG):
        w.advance(LIMIT_S)
    assert w.time() == 11.0
    w.close()


def test_inf_is_never_and_minus_inf_is_the_past():
    w = ManualWheel(start=5.0)
    ran = []
    never = w.call_later(math.inf, ran.append, "never")
    w.call_later(-math.inf, ran.append, "past")
    assert never.when() == math.inf
    assert w.advance(0) == 1 and ran == ["past"]
    w.close()


def test_close_timeout_beyond_the_range_means_no_limit():
    w = Wheel()
    assert w.close(timeout=1e300) == []
    w2 = Wheel()
    assert w2.close(timeout=-1e300) == []


def test_a_0d_numpy_float_is_a_number_of_seconds():
    np = pytest.importorskip("numpy")
    w = ManualWheel()
    assert w.call_later(np.array(1.5), print).when() == 1.5  # __index__ refuses, __float__ serves
    assert w.call_later(np.float64(2.5), print).when() == 2.5
    assert w.call_later(np.array(3), print).when() == 3.0
    w.close()


class LikeA0dFloatArray:
    """What a 0-d numpy float array does: __index__ raises TypeError."""

    def __index__(self):
        raise TypeError("only integer scalar arrays can be converted to a scalar index")

    def __float__(self):
        return 1.5


def test_an_index_that_refuses_falls_back_to_float():
    w = ManualWheel()
    assert w.call_later(LikeA0dFloatArray(), print).when() == 1.5
    assert w.call_every(LikeA0dFloatArray(), print).interval == 1.5
    w.close()


class IndexRaisesValueError:
    def __index__(self):
        raise ValueError("mine")

    def __float__(self):
        return 1.0


def test_an_index_that_fails_otherwise_than_typeerror_propagates():
    w = ManualWheel()
    with pytest.raises(ValueError, match="mine"):
        w.call_later(IndexRaisesValueError(), print)
    w.close()
