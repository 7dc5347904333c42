"""A threaded Wheel cannot pass for a ManualWheel (issue 9, finding 2).

Both kinds have the same layout, so object.__class__ assignment used to let
`w.__class__ = ManualWheel` through; advance_to() then ran a timer due in an
hour at once, and run_due() raced the wheel's own thread over the batch."""

import threading

import pytest

from pywheel import ManualWheel, Wheel

MANUAL_METHODS = [
    ("advance", (1.0,)),
    ("advance_to", (1e6,)),
    ("run_due", (1e6,)),
    ("collect_due", (1e6,)),
    ("run_collected", ()),
    ("next_deadline", ()),
    ("next_when", ()),
    ("advance_to_next", ()),
]


def test_class_assignment_between_kinds_is_refused():
    w, m = Wheel(), ManualWheel()
    with pytest.raises(TypeError, match="cannot become"):
        w.__class__ = ManualWheel
    with pytest.raises(TypeError, match="cannot become"):
        m.__class__ = Wheel
    assert type(w) is Wheel and type(m) is ManualWheel
    w.close()
    m.close()


def test_subclasses_with_empty_slots_cannot_swap_kinds_either():
    class T(Wheel):
        __slots__ = ()

    class T2(Wheel):
        __slots__ = ()

    class M(ManualWheel):
        __slots__ = ()

    t = T()
    with pytest.raises(TypeError):
        t.__class__ = M
    t.__class__ = T2  # within one kind, object's own rules apply
    assert type(t) is T2 and t.__class__ is T2
    t.close()


def test_manual_methods_refuse_a_threaded_core_whatever_the_route():
    # object's own __class__ setter, called directly, bypasses the wheel's
    # descriptor: the methods themselves must still refuse.
    w = Wheel()
    ran = threading.Event()
    h = w.call_later(3600, ran.set)
    object.__dict__["__class__"].__set__(w, ManualWheel)
    try:
        for name, args in MANUAL_METHODS:
            with pytest.raises(TypeError, match="has its own thread"):
                getattr(w, name)(*args)
    finally:
        object.__dict__["__class__"].__set__(w, Wheel)
    assert not ran.is_set() and not h.cancelled() and len(w) == 1
    w.close()


@pytest.mark.parametrize(("name", "args"), MANUAL_METHODS)
def test_manual_methods_through_the_class_refuse_a_threaded_wheel(name, args):
    w = Wheel()
    with pytest.raises(TypeError):
        getattr(ManualWheel, name)(w, *args)
    w.close()
