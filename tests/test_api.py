"""The public API of pywheel._core against DESIGN.md's "Semantics users can rely on".

Order and timing are checked on ManualWheel, where they are deterministic; the threaded
Wheel gets the same checks with generous bounds (poll up to 5 s, never a tight timing).
"""

import contextvars
import gc
import logging
import math
import random
import sys
import threading
import time
import weakref

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pywheel
from pywheel import ManualWheel, TimerHandle, Wheel

STATS_KEYS = {
    "rescheduled",
    "scheduled",
    "fired",
    "cancelled",
    "pending",
    "errors",
    "batches",
    "wakeups",
    "max_batch",
    "skipped_runs",
    "late_p50",
    "late_p99",
    "late_max",
    "tick",
}

VAR = contextvars.ContextVar("pywheel_test_var")
LEAK = contextvars.ContextVar("pywheel_test_leak")

TICK_NS = 1_000_000  # the fixtures' tick


def wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return predicate()
        time.sleep(0.002)
    return True


def ceil_tick_ns(when_ns: int, tick_ns: int = TICK_NS) -> int:
    return -(-when_ns // tick_ns) * tick_ns


def conserved(w) -> bool:
    s = w.stats()
    return s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]


@pytest.fixture(params=["manual", "threaded"])
def anywheel(request):
    w = ManualWheel(tick=0.001) if request.param == "manual" else Wheel()
    yield w
    w.close(timeout=5)


def settle(w, predicate) -> None:
    """Lets every timer due within the next second run (ManualWheel: advance)."""
    if isinstance(w, ManualWheel):
        w.advance(1.0)
    assert wait_for(predicate)


# ---------------------------------------------------------------------------
# basic firing, clock


def test_threaded_wheel_fires_with_positional_args(wheel):
    done = threading.Event()
    got = []

    def cb(*args):
        got.append((args, threading.get_ident()))
        done.set()

    h = wheel.call_later(0.01, cb, 1, "two", None)
    assert isinstance(h, TimerHandle)
    assert done.wait(5)
    assert got[0][0] == (1, "two", None)
    assert got[0][1] != threading.get_ident()  # ran on the wheel's own thread
    assert wait_for(lambda: wheel.stats()["fired"] == 1)
    assert not h.cancelled()
    assert h.cancel() is False
    assert len(wheel) == 0


def test_threaded_call_at_and_no_args(wheel):
    done = threading.Event()
    h = wheel.call_at(wheel.time() + 0.01, done.set)
    assert done.wait(5)
    assert time.monotonic() >= h.when()


def test_dropped_handle_still_runs(manual):
    ran = []
    manual.call_later(0.005, ran.append, "x")  # handle not kept: the wheel owns it
    gc.collect()
    assert manual.advance(0.01) == 1
    assert ran == ["x"]


def test_wheel_clock_is_time_monotonic(wheel):
    a = time.monotonic()
    t = wheel.time()
    b = time.monotonic()
    assert a <= t <= b
    a = time.monotonic_ns()
    t = wheel.time_ns()
    b = time.monotonic_ns()
    assert a <= t <= b


def test_manual_clock_starts_where_told():
    w = ManualWheel(tick=0.01, start=5.0)
    assert w.time() == 5.0
    assert w.time_ns() == 5_000_000_000
    w.advance(0.25)
    assert w.time_ns() == 5_250_000_000
    w.advance_to(7)
    assert w.time() == 7.0
    h = w.call_later(1, print)
    assert h.when() == 8.0
    w.close()


# ---------------------------------------------------------------------------
# contexts


def test_explicit_context_is_entered(anywheel):
    ctx = contextvars.Context()
    ctx.run(VAR.set, "explicit")
    seen = []

    def record(tag):
        seen.append((tag, VAR.get("unset")))

    def body():
        anywheel.call_later(0.002, record, "explicit", context=ctx)
        anywheel.call_later(0.003, record, "default")

    contextvars.Context().run(body)  # the caller's own context has nothing set
    settle(anywheel, lambda: len(seen) == 2)
    assert seen == [("explicit", "explicit"), ("default", "unset")]


def test_default_context_is_captured_at_scheduling(anywheel):
    seen = []

    def body():
        VAR.set("caller")
        anywheel.call_later(0.002, lambda: seen.append(VAR.get("unset")))
        VAR.set("changed after scheduling")
        anywheel.call_later(0.003, lambda: seen.append(VAR.get("unset")))

    contextvars.Context().run(body)
    settle(anywheel, lambda: len(seen) == 2)
    assert seen == ["caller", "changed after scheduling"]


@pytest.mark.parametrize("caller_has_vars", [False, True])
@pytest.mark.parametrize("same_tick", [False, True])
def test_callback_context_changes_do_not_leak(anywheel, caller_has_vars, same_tick):
    seen = []

    def writer():
        LEAK.set("from writer")
        VAR.set("overwritten by writer")
        seen.append(("writer", LEAK.get("unset"), VAR.get("unset")))

    def reader():
        seen.append(("reader", LEAK.get("unset"), VAR.get("unset")))

    def body():
        if caller_has_vars:
            VAR.set("caller")
        anywheel.call_later(0.002, writer)
        anywheel.call_later(0.002 if same_tick else 0.004, reader)
        if isinstance(anywheel, ManualWheel):
            anywheel.advance(0.01)  # callbacks run on this thread, inside this context
        assert wait_for(lambda: len(seen) == 2)
        # nothing came back into the caller's context
        assert LEAK.get("unset") == "unset"
        assert VAR.get("unset") == ("caller" if caller_has_vars else "unset")

    contextvars.Context().run(body)
    expected_var = "caller" if caller_has_vars else "unset"
    assert seen == [
        ("writer", "from writer", "overwritten by writer"),
        ("reader", "unset", expected_var),
    ]


def test_context_of_a_repeating_timer_is_used_for_every_run(manual):
    seen = []
    ctx = contextvars.Context()
    ctx.run(VAR.set, "ctx")
    h = manual.call_every(0.002, lambda: seen.append(VAR.get("unset")), context=ctx)
    manual.advance(0.006)
    h.cancel()
    assert seen == ["ctx"] * 3


# ---------------------------------------------------------------------------
# never early


def test_never_early_threaded(wheel):
    rng = random.Random(20240601)
    n = 300
    ran_at = [None] * n

    def cb(i):
        ran_at[i] = time.monotonic()

    plan = []
    for i in range(n):
        d = rng.choice([0.0, rng.uniform(0, 0.03), rng.uniform(0, 0.0015)])
        t0 = time.monotonic()
        h = wheel.call_later(d, cb, i)
        plan.append((t0, d, h))
    assert wait_for(lambda: all(t is not None for t in ran_at))
    for (t0, d, h), t in zip(plan, ran_at, strict=True):
        assert t >= t0 + d
        assert t >= h.when()
        assert h.when() >= t0 + d - 1e-9  # when() is the exact deadline (ns rounding)


def test_never_early_threaded_call_at(wheel):
    rng = random.Random(3)
    n = 200
    ran_at = [None] * n
    handles = []
    base = wheel.time()
    for i in range(n):
        when = base + rng.uniform(-0.001, 0.03)
        handles.append(wheel.call_at(when, lambda i=i: ran_at.__setitem__(i, time.monotonic())))
    assert wait_for(lambda: all(t is not None for t in ran_at))
    for h, t in zip(handles, ran_at, strict=True):
        assert t >= h.when()


def test_manual_time_inside_callback_is_the_deadlines_tick():
    w = ManualWheel(tick=0.01)
    seen = []
    for when in (0.001, 0.01, 0.0100001, 0.019999, 0.02, 0.35):
        w.call_at(when, lambda when=when: seen.append((when, w.time_ns())))
    assert w.advance(1) == 6
    for when, now_ns in seen:
        when_ns = round(when * 1e9)
        assert now_ns == ceil_tick_ns(when_ns, 10_000_000)
        assert now_ns >= when_ns
    w.close()


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
    assert wait_for(lambda: len(ran) == 1000)
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


# ---------------------------------------------------------------------------
# cancel


def test_cancel_before_firing(manual):
    ran = []
    h = manual.call_later(0.01, ran.append, 1)
    assert not h.cancelled()
    assert h.cancel() is True
    assert h.cancelled()
    assert h.cancel() is False  # twice
    assert h.cancelled()
    assert len(manual) == 0
    assert manual.advance(1) == 0
    assert ran == []
    s = manual.stats()
    assert (s["cancelled"], s["fired"], s["pending"]) == (1, 0, 0)


def test_cancel_after_firing(manual):
    ran = []
    h = manual.call_later(0.01, ran.append, 1)
    assert manual.advance(0.01) == 1
    assert h.cancel() is False
    assert not h.cancelled()
    assert ran == [1]
    assert manual.stats()["cancelled"] == 0


def test_cancel_a_later_timer_of_the_same_batch(manual):
    ran = []
    b = None
    outcome = []

    def a():
        ran.append("a")
        outcome.append(b.cancel())

    manual.call_at(0.005, a)
    b = manual.call_at(0.005, ran.append, "b")
    manual.call_at(0.005, ran.append, "c")
    assert manual.advance(0.01) == 2
    assert ran == ["a", "c"]
    assert outcome == [True]
    assert b.cancelled()
    assert conserved(manual)


def test_one_shot_cancelling_itself_returns_false(manual):
    out = []
    h = manual.call_later(0.001, lambda: out.append(h.cancel()))
    manual.advance(0.01)
    assert out == [False]
    assert not h.cancelled()


def test_cancel_from_another_thread_while_wheel_runs(wheel):
    ran = []
    sentinel = threading.Event()
    h = wheel.call_later(0.3, ran.append, "cancelled one")
    wheel.call_later(0.4, sentinel.set)
    wheel.call_later(0.001, ran.append, "early")  # the wheel thread is busy meanwhile
    out = []
    t = threading.Thread(target=lambda: out.append(h.cancel()))
    t.start()
    t.join(5)
    assert out == [True]
    assert h.cancelled()
    assert sentinel.wait(5)
    assert ran == ["early"]


def test_cancel_true_means_never_started_stress(wheel):
    rng = random.Random(4)
    n = 2000
    ran = []
    lock = threading.Lock()

    def cb(i):
        with lock:
            ran.append(i)

    handles = [wheel.call_later(rng.uniform(0, 0.01), cb, i) for i in range(n)]
    results = {}
    for i in range(0, n, 2):
        results[i] = handles[i].cancel()
    done = threading.Event()
    wheel.call_later(0.05, done.set)
    assert done.wait(5)
    assert wait_for(lambda: len(wheel) == 0)
    assert len(ran) == len(set(ran))  # nothing ran twice
    expected = {i for i in range(n) if not results.get(i, False)}
    assert set(ran) == expected
    for i, r in results.items():
        assert handles[i].cancelled() is r
    assert conserved(wheel)


def test_cancel_from_a_racing_thread(wheel):
    n = 2000
    ran = set()
    handles = [wheel.call_later((i % 50) * 0.0002, ran.add, i) for i in range(n)]
    results = {}

    def canceller():
        for i in range(1, n, 2):
            results[i] = handles[i].cancel()

    t = threading.Thread(target=canceller)
    t.start()
    t.join(5)
    done = threading.Event()
    wheel.call_later(0.05, done.set)
    assert done.wait(5)
    assert ran == {i for i in range(n) if not results.get(i, False)}


# ---------------------------------------------------------------------------
# repeating


def test_call_every_lands_on_first_plus_k_interval(manual):
    times = []
    whens = []

    def cb(tag):
        assert tag == "tag"
        times.append(manual.time_ns())
        whens.append(h.when())

    h = manual.call_every(0.005, cb, "tag")
    assert h.interval == 0.005
    assert h.when() == 0.005
    assert manual.advance(0.1) == 20
    assert times == [5_000_000 * k for k in range(1, 21)]
    assert whens == pytest.approx([0.005 * k for k in range(1, 21)])
    assert h.when() == pytest.approx(0.105)  # the next run
    assert len(manual) == 1
    s = manual.stats()
    assert s["fired"] == 20
    assert s["skipped_runs"] == 0
    assert conserved(manual)
    assert h.cancel() is True
    assert manual.advance(1) == 0


def test_call_every_first_is_respected():
    w = ManualWheel(tick=0.001, start=2.0)
    times = []
    h = w.call_every(0.004, lambda: times.append(w.time_ns()), first=0.001)
    assert h.when() == pytest.approx(2.001)
    w.advance(0.02)
    assert times == [2_001_000_000 + 4_000_000 * k for k in range(5)]
    h.cancel()
    # first=0 runs at once (the next batch)
    times.clear()
    h = w.call_every(0.5, lambda: times.append(w.time_ns()), first=0)
    assert w.advance(0) == 1
    assert times == [w.time_ns()]
    w.close()


def test_call_every_interval_not_a_tick_multiple_never_early_no_drift():
    w = ManualWheel(tick=0.001)
    runs = []
    h = w.call_every(0.0015, lambda: runs.append((round(h.when() * 1e9), w.time_ns())))
    w.advance(0.03)
    assert [when for when, _ in runs] == [1_500_000 * k for k in range(1, 21)]
    for when, now in runs:
        assert now == ceil_tick_ns(when)
    w.close()


def test_call_every_cancel_inside_its_own_callback(manual):
    runs = []
    out = []

    def cb():
        runs.append(manual.time_ns())
        if len(runs) == 3:
            out.append(h.cancel())

    h = manual.call_every(0.002, cb)
    manual.advance(0.1)
    assert runs == [2_000_000, 4_000_000, 6_000_000]
    assert out == [True]
    assert h.cancelled()
    assert h.cancel() is False
    assert len(manual) == 0


# Stopping a repeating timer during its own run (h.cancel() from its callback, or
# wheel.close() from it) must not count as a cancelled scheduling: its run counted as
# fired and no next run was scheduled yet.
@pytest.mark.parametrize("how", ["self-cancel", "close"])
def test_call_every_stopped_in_its_own_run_keeps_stats_conserved(manual, how):
    if how == "self-cancel":
        h = manual.call_every(0.002, lambda: h.cancel())
    else:
        h = manual.call_every(0.002, manual.close)
    manual.advance(0.01)
    assert h.cancelled()
    assert conserved(manual), manual.stats()


def test_call_every_exception_keeps_it_running(manual):
    errors = []
    manual.set_exception_handler(lambda w, ctx: errors.append(ctx))
    runs = []

    def cb():
        runs.append(manual.time_ns())
        raise ValueError(len(runs))

    h = manual.call_every(0.001, cb)
    assert manual.advance(0.005) == 5
    assert len(runs) == 5
    assert [e["exception"].args[0] for e in errors] == [1, 2, 3, 4, 5]
    assert all(e["handle"] is h for e in errors)
    assert manual.stats()["errors"] == 5
    assert not h.cancelled()
    h.cancel()


def test_manual_jump_does_not_skip(manual):
    times = []
    h = manual.call_every(0.01, lambda: times.append(manual.time_ns()))
    assert manual.advance(1.0) == 100
    assert times == [10_000_000 * k for k in range(1, 101)]
    assert manual.stats()["skipped_runs"] == 0
    h.cancel()


def test_manual_interval_shorter_than_tick_skips_and_counts():
    # Runs can only happen on tick boundaries: the ones in between are skipped.
    w = ManualWheel(tick=0.01)
    times = []
    h = w.call_every(0.001, lambda: times.append(w.time_ns()))
    assert w.advance(0.05) == 5
    assert times == [10_000_000 * k for k in range(1, 6)]
    # 0.001 runs at 0.01 (tick 1); next strictly after 0.01 is 0.011 -> runs at 0.02...
    assert w.stats()["skipped_runs"] == 9 * 4 + 9
    assert round(h.when() * 1e9) == 51_000_000
    w.close()


def test_threaded_stall_skips_runs_and_counts_them(wheel):
    interval_ns = 20_000_000
    runs = []  # (when_ns, start, end)
    done = threading.Event()

    def cb():
        start = time.monotonic_ns()
        if not runs:
            time.sleep(0.2)  # stall for ~10 intervals
        runs.append((round(h.when() * 1e9), start, time.monotonic_ns()))
        if len(runs) == 4:
            h.cancel()
            done.set()

    h = wheel.call_every(interval_ns / 1e9, cb)
    first_ns = round(h.when() * 1e9)
    assert done.wait(5)
    whens = [r[0] for r in runs]
    assert all((w - first_ns) % interval_ns == 0 for w in whens)  # no drift
    assert whens == sorted(set(whens))
    # the run after the stall is the first deadline after the stall ended: not replayed
    assert whens[1] > runs[0][2]
    assert whens[1] - whens[0] >= 5 * interval_ns
    skipped = wheel.stats()["skipped_runs"]
    assert skipped >= 5
    assert skipped == sum(
        (b - a) // interval_ns - 1 for a, b in zip(whens[:-1], whens[1:], strict=True)
    )
    for when, start, _ in runs:
        assert start >= when


def test_call_every_handle_interval_none_for_one_shot(manual):
    assert manual.call_later(1, print).interval is None
    assert manual.call_at(1, print).interval is None
    assert manual.call_every(0.25, print).interval == 0.25


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


# ---------------------------------------------------------------------------
# close


def test_close_manual_returns_never_run_handles_sorted(manual):
    ran = []
    a = manual.call_later(0.3, ran.append, "a")
    b = manual.call_later(0.1, ran.append, "b")
    c = manual.call_later(0.2, ran.append, "c")
    d = manual.call_later(float("inf"), ran.append, "d")
    e = manual.call_every(0.05, ran.append, "e")
    f = manual.call_later(0.01, ran.append, "f")
    manual.advance(0.01)
    assert ran == ["f"]
    assert not manual.closed
    out = manual.close()
    assert out == [e, b, c, a, d]
    assert all(h.cancelled() for h in out)
    assert not f.cancelled()
    assert manual.closed
    assert len(manual) == 0
    assert manual.close() == []
    assert manual.next_deadline() is None
    assert manual.advance(1) == 0
    assert ran == ["f"]
    s = manual.stats()
    assert (s["cancelled"], s["pending"]) == (5, 0)
    assert conserved(manual)


def test_close_threaded(wheel):
    ran = []
    a = wheel.call_later(30, ran.append, "a")
    b = wheel.call_later(20, ran.append, "b")
    r = wheel.call_every(10, ran.append, "r")
    out = wheel.close()
    assert out == [r, b, a]
    assert all(h.cancelled() for h in out)
    assert wheel.closed
    assert len(wheel) == 0
    assert wheel.close() == []
    assert wheel.close(timeout=0.1) == []


@pytest.mark.parametrize("kind", ["manual", "threaded"])
def test_schedule_after_close_raises(kind):
    w = ManualWheel() if kind == "manual" else Wheel()
    w.close()
    before = w.stats()["scheduled"]
    with pytest.raises(RuntimeError):
        w.call_later(1, print)
    with pytest.raises(RuntimeError):
        w.call_at(1, print)
    with pytest.raises(RuntimeError):
        w.call_every(1, print)
    assert w.stats()["scheduled"] == before
    assert len(w) == 0


@pytest.mark.parametrize("cls", [Wheel, ManualWheel])
def test_context_manager_closes(cls):
    with cls() as w:
        assert isinstance(w, cls)
        h = w.call_later(10, print)
        assert not w.closed
    assert w.closed
    assert h.cancelled()
    assert len(w) == 0


def test_context_manager_does_not_swallow_exceptions():
    with pytest.raises(ZeroDivisionError):
        with Wheel() as w:
            w.call_later(10, print)
            1 / 0  # noqa: B018
    assert w.closed


def test_close_from_inside_a_callback_threaded(wheel):
    ran = []
    closed_with = []
    done = threading.Event()

    def closer():
        closed_with.append(wheel.close())
        done.set()

    t = wheel.time() + 0.01
    wheel.call_at(t, closer)
    b = wheel.call_at(t, ran.append, "b")  # same deadline: same batch, after closer
    c = wheel.call_later(0.05, ran.append, "c")
    assert done.wait(5)
    assert wheel.closed
    assert closed_with == [[b, c]]  # b was in the running batch but had not started
    assert b.cancelled() and c.cancelled()
    assert wheel.close() == []  # waits for the thread to leave
    time.sleep(0.08)
    assert ran == []
    with pytest.raises(RuntimeError):
        wheel.call_later(0, print)


def test_close_from_inside_a_callback_manual(manual):
    ran = []
    closed_with = []
    manual.call_at(0.002, lambda: closed_with.append(manual.close()))
    b = manual.call_at(0.002, ran.append, "b")
    c = manual.call_at(0.005, ran.append, "c")
    r = manual.call_every(0.001, ran.append, "r")
    assert manual.advance(0.01) == 2  # r at 0.001, then the closer
    assert ran == ["r"]
    # sorted by (deadline, scheduling order): r's re-arm at 0.001 came after b
    assert closed_with == [[b, r, c]]
    assert manual.closed
    assert all(h.cancelled() for h in (b, c, r))


def test_close_from_a_repeating_callback_manual(manual):
    closed_with = []
    r = manual.call_every(0.002, lambda: closed_with.append(manual.close()))
    assert manual.advance(0.02) == 1
    assert closed_with == [[r]]  # the running repeating timer never runs again
    assert r.cancelled()


def test_close_waits_for_the_running_callback(wheel):
    started = threading.Event()
    finished = []

    def slow():
        started.set()
        time.sleep(0.1)
        finished.append(True)

    wheel.call_later(0, slow)
    later = wheel.call_later(0.001, print)
    assert started.wait(5)
    out = wheel.close()
    assert finished == [True]  # close() returned after the running batch
    assert out == [later]


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


# ---------------------------------------------------------------------------
# reference counts


class Callback:
    def __call__(self, *args):
        pass


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

    assert wait_for(back)
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
# ManualWheel


def test_advance_returns_count_and_runs_new_timers_at_their_tick(manual):
    ran = []

    def spawner():
        ran.append(("spawner", manual.time_ns()))
        manual.call_later(0.003, lambda: ran.append(("child", manual.time_ns())))
        manual.call_later(0.5, lambda: ran.append(("too late", manual.time_ns())))

    manual.call_at(0.002, spawner)
    manual.call_at(0.004, lambda: ran.append(("other", manual.time_ns())))
    assert manual.advance(0.01) == 3
    assert ran == [("spawner", 2_000_000), ("other", 4_000_000), ("child", 5_000_000)]
    assert manual.time_ns() == 10_000_000
    assert len(manual) == 1


def test_advance_to_and_time_outside_callbacks(manual):
    assert manual.advance_to(0.0025) == 0
    assert manual.time_ns() == 2_500_000
    h = manual.call_later(0.001, print)  # 0.0035 -> due at tick 0.004
    assert h.when() == pytest.approx(0.0035)
    assert manual.next_deadline() == pytest.approx(0.004)
    assert manual.advance_to(0.0039) == 0  # not yet: its tick boundary is 0.004
    manual.set_exception_handler(None)
    h.cancel()


def test_time_cannot_go_backwards(manual):
    manual.advance(1)
    with pytest.raises(ValueError):
        manual.advance(-0.001)
    with pytest.raises(ValueError):
        manual.advance_to(0.5)
    with pytest.raises(ValueError):
        manual.advance(float("nan"))
    with pytest.raises(ValueError):
        manual.advance(float("inf"))
    with pytest.raises(TypeError):
        manual.advance("1")
    with pytest.raises(TypeError):
        manual.advance_to(None)
    assert manual.time() == 1.0
    assert manual.advance(0) == 0
    assert manual.advance_to(1.0) == 0


def test_next_deadline_and_advance_to_next(manual):
    assert manual.next_deadline() is None
    assert manual.advance_to_next() == 0
    assert manual.time() == 0.0
    ran = []
    manual.call_at(0.0071, ran.append, "a")
    manual.call_at(0.0075, ran.append, "b")
    manual.call_at(0.02, ran.append, "c")
    assert manual.next_deadline() == pytest.approx(0.008)
    assert manual.advance_to_next() == 2
    assert manual.time_ns() == 8_000_000
    assert ran == ["a", "b"]
    assert manual.next_deadline() == pytest.approx(0.02)
    assert manual.advance_to_next() == 1
    assert manual.time_ns() == 20_000_000
    assert manual.next_deadline() is None
    # an overdue timer: next_deadline is now
    manual.call_later(-1, ran.append, "d")
    assert manual.next_deadline() == pytest.approx(0.02)
    assert manual.advance_to_next() == 1
    assert ran == ["a", "b", "c", "d"]


def test_callback_scheduling_into_the_past_runs_in_the_next_batch(manual):
    ran = []

    def a():
        ran.append(("a", manual.time_ns()))
        manual.call_later(-1, lambda: ran.append(("past", manual.time_ns())))
        manual.call_later(0, lambda: ran.append(("zero", manual.time_ns())))

    manual.call_at(0.002, a)
    manual.call_at(0.002, lambda: ran.append(("b", manual.time_ns())))
    manual.call_at(0.002, lambda: ran.append(("c", manual.time_ns())))
    assert manual.advance(0.01) == 5
    assert ran == [
        ("a", 2_000_000),
        ("b", 2_000_000),
        ("c", 2_000_000),
        ("past", 2_000_000),
        ("zero", 2_000_000),
    ]
    assert manual.stats()["batches"] == 2


def test_callback_scheduling_into_the_past_threaded(wheel):
    ran = []
    done = threading.Event()
    t0 = wheel.time() + 0.01

    def a():
        ran.append("a")
        wheel.call_later(-1, ran.append, "past")

    wheel.call_at(t0, a)
    wheel.call_at(t0, ran.append, "b")
    wheel.call_at(t0 + 0.02, done.set)
    assert done.wait(5)
    assert ran == ["a", "b", "past"]


# ---------------------------------------------------------------------------
# stats


def test_stats_keys_and_types(anywheel):
    s = anywheel.stats()
    assert set(s) == STATS_KEYS
    for k in ("scheduled", "fired", "cancelled", "pending", "errors", "batches"):
        assert isinstance(s[k], int) and s[k] == 0
    for k in ("late_p50", "late_p99", "late_max", "tick"):
        assert isinstance(s[k], float)
    assert s["tick"] == 0.001


def test_stats_conservation_mixed_workload(manual):
    rng = random.Random(5)
    manual.set_exception_handler(lambda w, ctx: None)
    handles = []

    def maybe_raise(i):
        if i % 7 == 0:
            raise ValueError(i)

    for i in range(500):
        d = rng.uniform(-0.01, 0.2)
        if i % 50 == 0:
            handles.append(manual.call_every(rng.uniform(0.003, 0.02), maybe_raise, i))
        else:
            handles.append(manual.call_later(d, maybe_raise, i))
    assert conserved(manual)
    for h in rng.sample(handles, 120):
        h.cancel()
    assert conserved(manual)
    manual.advance(0.1)
    assert conserved(manual)
    s = manual.stats()
    assert s["errors"] > 0
    assert s["pending"] == len(manual) > 0
    manual.advance(0.05)
    manual.close()
    s = manual.stats()
    assert conserved(manual)
    assert s["pending"] == 0
    assert s["batches"] >= 1
    assert s["max_batch"] >= 1


def test_stats_conservation_threaded(wheel):
    rng = random.Random(6)
    hs = [wheel.call_later(rng.uniform(0, 0.02), lambda: None) for _ in range(300)]
    for h in hs[::3]:
        h.cancel()
    r = wheel.call_every(0.005, lambda: None)
    time.sleep(0.03)
    r.cancel()
    assert wait_for(lambda: len(wheel) == 0)
    s = wheel.stats()
    assert s["fired"] + s["cancelled"] == s["scheduled"]
    assert s["wakeups"] >= 1
    assert s["late_max"] >= s["late_p99"] >= s["late_p50"] >= 0


# ---------------------------------------------------------------------------
# TimerHandle


def test_handle_repr(manual):
    def my_callback():
        pass

    h = manual.call_later(1, my_callback)
    r = repr(h)
    assert "pending" in r and "my_callback" in r
    hr = manual.call_every(0.5, my_callback)
    assert "pending" in repr(hr) and "my_callback" in repr(hr) and "0.5" in repr(hr)
    h.cancel()
    assert "cancelled" in repr(h)
    d = manual.call_later(0.001, my_callback)
    manual.advance(0.001)
    assert "done" in repr(d)
    hr.cancel()


def test_handle_equality_is_identity(manual):
    a = manual.call_later(1, print, 1)
    b = manual.call_later(1, print, 1)
    assert a == a
    assert a != b
    assert len({a, b, a}) == 2
    assert hash(a) == hash(a)


def test_handle_cannot_be_instantiated():
    with pytest.raises(TypeError):
        TimerHandle()
    with pytest.raises(TypeError):
        type(pywheel.ManualWheel().call_later(1, print))()


def test_public_surface():
    assert set(pywheel.__all__) == {"ManualWheel", "TimerHandle", "Wheel"}
    assert issubclass(ManualWheel, Wheel)


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
