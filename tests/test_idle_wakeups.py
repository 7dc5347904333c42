"""An idle wheel never wakes up (docs/explanation/threading.md), whatever its tick and however far
its timers are: a deadline beyond the wheel's span (64**6 ticks: 68.7 s at
1 ns, 19 h at 1 us) waits on the overflow list, and the thread sleeps toward
that deadline itself, not toward the span's end and not at once.

stats()['wakeups'] counts every return of the thread from its wait: a timer
scheduled while the thread sleeps with nothing pending is a new earliest
deadline, which signals it once (docs/explanation/threading.md).  So each wheel
here settles on its deadline first; from then on, for a generous window, the
count must not move.  All wheels share one window, so the test takes about
two seconds, and it asserts counts, not speed.
"""

import time

import pywheel

TICKS = [1e-9, 1e-8, 1e-6, 1e-3, 1.0]
SPAN_TICKS = 64**6


def far_deadlines(tick):
    """Delays past the wheel's span (and one within it), capped to what the
    clock can hold with room to spare."""
    span = SPAN_TICKS * tick
    limit = 9.2e9 - time.monotonic() - 1e6
    out = [min(d, limit) for d in (0.5 * span, 1.5 * span, 10 * span, 1000 * span, 3600.0)]
    return sorted({d for d in out if d > 2.0})


def test_idle_wheels_with_far_timers_never_wake_up():
    wheels = []
    try:
        for tick in TICKS:
            for delay in far_deadlines(tick):
                w = pywheel.Wheel(tick=tick)
                time.sleep(0.01)  # the thread sleeps with nothing pending
                w.call_later(delay, print)
                wheels.append((tick, delay, w))
        time.sleep(0.2)  # each thread took its signal and sleeps toward the deadline
        settled = [w.stats()["wakeups"] for _, _, w in wheels]
        # at most the one signal for the new earliest deadline
        assert all(n <= 1 for n in settled), [
            (t, d, n) for (t, d, _), n in zip(wheels, settled, strict=True) if n > 1
        ]
        time.sleep(1.5)
        woke = [
            (tick, delay, w.stats()["wakeups"] - n)
            for (tick, delay, w), n in zip(wheels, settled, strict=True)
            if w.stats()["wakeups"] != n
        ]
        assert not woke, f"(tick, delay, extra wake-ups) of idle wheels: {woke}"
        for _, _, w in wheels:
            s = w.stats()
            assert s["batches"] == 0 and s["pending"] == 1, s
    finally:
        for _, _, w in wheels:
            w.close()


def test_a_timer_scheduled_at_once_costs_at_most_its_signal():
    # scheduled right after the constructor: whether the thread already slept
    # (one signal) or not yet (none) is a race; after that, nothing (at 1 ns
    # an hour is far past the 68.7 s span)
    wheels = [pywheel.Wheel(tick=t) for t in TICKS]
    try:
        hs = [w.call_later(3600, print) for w in wheels]
        time.sleep(0.2)
        before = [w.stats()["wakeups"] for w in wheels]
        assert all(n <= 1 for n in before), before
        time.sleep(1.0)
        assert [w.stats()["wakeups"] for w in wheels] == before
        assert all(not h.cancelled() for h in hs)
    finally:
        for w in wheels:
            w.close()
