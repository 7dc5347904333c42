"""Order (docs/explanation/guarantees.md, "Order"): of two timers pending at
the same moment, the earlier deadline runs first, within one tick too, equal
deadlines in scheduling order, and a re-armed timer takes a fresh place; a
ManualWheel matches a sorted-list model."""

import random

import pytest
from helpers import ceil_tick_ns, conserved, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from pywheel import ManualWheel

# ---------------------------------------------------------------------------
# order


def _random_deadlines_ns(rng: random.Random, n: int, tick_ns: int) -> list[int]:
    shared = [rng.randrange(1, 200) * tick_ns // 3 for _ in range(10)]
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:  # many exactly equal deadlines
            out.append(rng.choice(shared))
        elif r < 0.7:  # same tick, deadlines microseconds apart
            out.append(rng.randrange(1, 30) * tick_ns - rng.randrange(0, 1000) * 1000)
        else:
            out.append(rng.randrange(1, 200 * tick_ns))
    return out


def test_order_manual_1000_random_deadlines():
    tick_ns = 10_000_000
    w = ManualWheel(tick=tick_ns / 1e9)
    rng = random.Random(1)
    ran = []
    handles = []
    for i, when_ns in enumerate(_random_deadlines_ns(rng, 1000, tick_ns)):
        h = w.call_at(when_ns / 1e9, lambda i=i: ran.append((i, w.time_ns())))
        handles.append(h)
    expected = sorted(range(1000), key=lambda i: (handles[i].when(), i))
    assert w.advance(2.5) == 1000
    assert [i for i, _ in ran] == expected
    for i, now_ns in ran:
        when_ns = round(handles[i].when() * 1e9)
        assert now_ns == ceil_tick_ns(when_ns, tick_ns)
    assert w.stats()["fired"] == 1000
    w.close()


def test_order_within_one_tick_is_exact_deadline_order():
    # 100 deadlines a microsecond apart, all in the tick (0.10, 0.11], scheduled
    # latest first; plus equal deadlines that keep scheduling order.
    w = ManualWheel(tick=0.01)
    ran = []
    for i in range(100):
        w.call_at(0.105 - i * 1e-6, ran.append, ("exact", i))
    for j in range(5):
        w.call_at(0.1001, ran.append, ("tie", j))
    w.call_at(0.11, ran.append, ("boundary", 0))
    w.call_at(0.100001, ran.append, ("first", 0))
    assert w.next_deadline() == pytest.approx(0.11)
    assert w.advance_to_next() == 107
    expected = (
        [("first", 0)]
        + [("tie", j) for j in range(5)]
        + [("exact", i) for i in reversed(range(100))]
        + [("boundary", 0)]
    )
    assert ran == expected
    w.close()


def test_order_threaded_call_at_near_future(wheel):
    rng = random.Random(2)
    ran = []
    handles = []
    base = wheel.time() + 0.3
    offsets = [rng.randrange(0, 40) * 0.001 for _ in range(8)]
    for i in range(1000):
        r = rng.random()
        if r < 0.4:
            when = base + rng.choice(offsets)
        elif r < 0.8:
            when = base + rng.choice(offsets) + rng.randrange(1, 900) * 1e-6
        else:
            when = base + rng.uniform(0, 0.04)
        handles.append(wheel.call_at(when, ran.append, i))
    assert wheel.time() < base, "scheduling took longer than the margin"
    assert wait_for(lambda: len(ran) == 1000, timeout=5.0)
    assert ran == sorted(range(1000), key=lambda i: (handles[i].when(), i))


def test_rearm_takes_a_fresh_place_in_order(manual):
    ran = []
    r = manual.call_every(0.01, lambda: ran.append("R"))
    manual.call_at(0.02, ran.append, "O")  # scheduled before R's re-arm at 0.01
    manual.call_at(0.0105, lambda: manual.call_at(0.02, ran.append, "Q"))  # after it
    manual.advance(0.02)
    r.cancel()
    assert ran == ["R", "O", "R", "Q"]


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(-5_000_000, 60_000_000)),
            st.tuples(st.just("advance"), st.integers(0, 25_000_000)),
            st.tuples(st.just("cancel"), st.integers(0, 1000)),
        ),
        max_size=60,
    ),
    tick_ns=st.sampled_from([1_000_000, 3_000_000, 10_000_000]),
)
def test_manual_matches_sorted_list_model(ops, tick_ns):
    w = ManualWheel(tick=tick_ns / 1e9)
    ran = []
    model = {}  # id -> (when_ns, id); pending timers
    handles = {}
    now = 0
    for op, arg in ops:
        if op == "add":
            i = len(handles)
            handles[i] = w.call_later(arg / 1e9, lambda i=i: ran.append((i, w.time_ns())))
            model[i] = (now + arg, i)
        elif op == "cancel" and handles:
            i = arg % len(handles)
            assert handles[i].cancel() is (i in model)
            model.pop(i, None)
        elif op == "advance":
            before = now
            now += arg
            last_tick = now // tick_ns
            due = sorted(
                k for k in model.values() if ceil_tick_ns(k[0], tick_ns) // tick_ns <= last_tick
            )
            del ran[:]
            assert w.advance(arg / 1e9) == len(due)
            assert [i for i, _ in ran] == [i for _, i in due]
            for i, t in ran:
                assert t >= model[i][0]  # never early
                # at its own tick; an overdue one at the time the advance began
                assert t == max(ceil_tick_ns(model[i][0], tick_ns), before)
                del model[i]
        assert len(w) == len(model)
        assert conserved(w)
    w.close()
