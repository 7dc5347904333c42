"""Repeating (docs/explanation/guarantees.md, "Repeating"): call_every runs at
a fixed rate anchored at the first run, never early and without drift when
the interval is not a multiple of the tick; runs a stall (or a ManualWheel
jump) made impossible are skipped and counted, not run late in a burst; it
may cancel itself from its own callback, and keeps running after an
exception."""

import threading
import time

import pytest
from helpers import ceil_tick_ns, conserved

from pywheel import ManualWheel

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
