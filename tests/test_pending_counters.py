"""len(), stats()['pending'], next_when() and next_deadline() read a kept count
of the unstarted batch, not a scan of it (up to 65,536 entries on a
ManualWheel).  The count must agree with the scan in every state a program can
reach: timers set aside by collect_due(), cancelled or moved while set aside,
from inside callbacks of a running batch, after a KeyboardInterrupt put the
rest back, after close().  pywheel._core._batch_live(wheel) returns
(kept, scanned); these tests drive random programs and compare them after
every step and inside every callback.
"""

import math
import os
import threading

import pytest
from helpers import run_script
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pywheel
from pywheel import _core


def batch_live(w):
    return _core._batch_live(w)  # a test hook of every build


def agree(w):
    kept, scanned = batch_live(w)
    assert kept == scanned, f"kept count {kept}, scan {scanned}"


offsets = st.sampled_from([-1.0, -1e-3, 0.0, 1e-9, 5e-4, 1e-3, 1.5e-3, 2e-3, 0.01, 1.0, math.inf])


# How many times callbacks may act on other timers within one step.  A
# callback that moves a repeating timer into the past (itself, or one whose
# callback moves it back) makes a program that never ends: advance() runs
# what callbacks make due inside its window, by design (docs/howto/manual-wheel.md),
# so such a step ran forever, at 100 % CPU and with no output, in the runs
# whose random programs drew it (issue 27 #11: a hang "on 3.14 under load"
# that is neither).  Past the budget callbacks only check the counts.
ACTS_PER_STEP = 200


class Counters(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.w = pywheel.ManualWheel(tick=1e-3, start=10.0)
        self.handles = []
        self.ran = set()  # one-shots that ran
        self.actions = {}  # handle index -> what its callback does to others
        self.acts_left = ACTS_PER_STEP

    def teardown(self):
        self.w.close()

    def cb(self, i):
        agree(self.w)
        self.ran.add(i)
        act = self.actions.get(i)
        if act is not None and self.acts_left > 0:
            self.acts_left -= 1
            kind, j = act
            if j < len(self.handles):
                h = self.handles[j]
                if kind == "cancel":
                    h.cancel()
                elif kind == "move":
                    h.reschedule(self.w.time() + 1e-4)
                else:
                    h.reschedule(-math.inf)
        agree(self.w)
        assert len(self.w) == self.w.stats()["pending"]

    @rule(
        offset=offsets,
        repeat=st.booleans(),
        act=st.none() | st.tuples(st.sampled_from(["cancel", "move", "past"]), st.integers(0, 30)),
    )
    def schedule(self, offset, repeat, act):
        i = len(self.handles)
        if act is not None:
            self.actions[i] = act
        if repeat and math.isfinite(offset):
            h = self.w.call_every(2e-3, self.cb, i, first=offset)  # first: a delay
        else:
            h = self.w.call_at(self.w.time() + offset, self.cb, i)
        self.handles.append(h)

    @precondition(lambda self: self.handles)
    @rule(k=st.integers(0, 1000))
    def cancel(self, k):
        self.handles[k % len(self.handles)].cancel()

    @precondition(lambda self: self.handles)
    @rule(k=st.integers(0, 1000), offset=offsets)
    def reschedule(self, k, offset):
        self.handles[k % len(self.handles)].reschedule(self.w.time() + offset)

    @rule(dt=st.sampled_from([0.0, 1e-9, 4e-4, 1e-3, 2.5e-3]))
    def collect_due(self, dt):
        self.w.collect_due(self.w.time() + dt)

    @rule()
    def run_collected(self):
        self.w.run_collected()

    @rule(dt=st.sampled_from([0.0, 1e-4, 1e-3, 3e-3]))
    def run_due(self, dt):
        self.w.run_due(self.w.time() + dt)

    @rule(dt=st.sampled_from([0.0, 1e-4, 1e-3, 3e-3]))
    def advance(self, dt):
        self.w.advance(dt)

    @invariant()
    def counts_agree(self):  # after every step
        self.acts_left = ACTS_PER_STEP
        agree(self.w)
        live = [
            h
            for i, h in enumerate(self.handles)
            if not h.cancelled() and (h.interval is not None or i not in self.ran)
        ]
        assert len(self.w) == self.w.stats()["pending"] == len(live)
        # next_when() says something is coming exactly when a pending timer
        # has a finite deadline, and never later than the least of them
        finite = [h.when() for h in live if h.when() < math.inf]
        nw = self.w.next_when()
        assert (nw is None) == (not finite)
        if finite:
            assert nw <= max(min(finite), self.w.time())
        nd = self.w.next_deadline()
        assert (nd is None) == (not finite)


TestCounters = Counters.TestCase
TestCounters.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_every_counters_step_ends():
    # The step that ran forever in the state machine above (issue 27 #11): a
    # repeating timer whose callback moves it into the past, made due, then
    # advance().  In a child with a timeout, since it used never to return.
    proc = run_script(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_pending_counters import Counters

        m = Counters()
        m.schedule(offset=0.0, repeat=True, act=("past", 0))
        m.reschedule(k=0, offset=0.0)
        m.advance(dt=1e-3)
        m.counts_agree()
        m.teardown()
        print("ended")
        """,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, "ended\n"), proc.stderr


def test_set_aside_batch_cancelled_and_moved():
    w = pywheel.ManualWheel(tick=1e-3)
    hs = [w.call_at(0.0005, lambda: None) for _ in range(1000)]
    assert w.collect_due(0.001) == 1000
    assert batch_live(w) == (1000, 1000) and len(w) == 1000
    for h in hs[::3]:
        h.cancel()
    for h in hs[1::3]:
        h.reschedule(5.0)
    agree(w)
    assert len(w) == 1000 - len(hs[::3])
    # the set-aside ones are overdue: next_when() is their own when()
    # (the one rule for overdue timers, issue 17 #5)
    assert w.next_when() == 0.0005
    assert w.run_collected() == len(hs[2::3])
    agree(w)
    assert len(w) == len(hs[1::3]) and w.next_when() == 5.0
    w.close()
    assert batch_live(w) == (0, 0) and len(w) == 0


def test_keyboard_interrupt_puts_back_and_recounts():
    w = pywheel.ManualWheel(tick=1e-3)

    def stop():
        raise KeyboardInterrupt

    w.call_at(0.0005, stop)
    for _ in range(10):
        w.call_at(0.0006, lambda: None)
    with pytest.raises(KeyboardInterrupt):
        w.run_due(0.001)
    assert batch_live(w) == (0, 0)
    assert len(w) == 10 and w.next_when() <= w.time()  # overdue, in the wheel again
    assert w.run_due(0.001) == 10
    agree(w)


def test_threaded_parts_agree_inside_callbacks():
    n = 10_000
    seen, errors, cancelled = [], [], [0]
    done = threading.Event()
    with pywheel.Wheel() as w:
        handles = []

        def each(i):
            try:
                kept, scanned = batch_live(w)
                seen.append(kept == scanned and len(w) == w.stats()["pending"])
                if i % 97 == 0 and i + 1 < len(handles) and handles[i + 1].cancel():
                    cancelled[0] += 1
            except BaseException as e:  # reported below, not in the handler
                errors.append(e)
            if len(seen) + cancelled[0] >= n:
                done.set()

        def schedule():
            handles.extend(w.call_at(-1.0, each, i) for i in range(n))

        w.call_later(0, schedule)
        assert done.wait(60)
        assert not errors and all(seen)
        assert batch_live(w) == (0, 0) and len(w) == 0
