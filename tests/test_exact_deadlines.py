"""ManualWheel's event-loop API against a model: run_due(), collect_due() +
run_collected() and next_when() work on exact deadlines, not ticks.

A hypothesis state machine schedules timers at nanosecond offsets around
tick boundaries (so the partial tick, and its cached least deadline, are
exercised), cancels them (also between collect and run, and from callbacks),
and moves time in small steps or exactly onto a pending deadline.  After
every step: what ran is exactly what was pending with when <= the target,
in (when, scheduling) order, never early; timers scheduled by callbacks wait
for the next call; next_when() is the model's least pending deadline."""

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

import pywheel

TICK_NS = 1_000_000

offsets_ns = st.one_of(
    st.integers(0, 3 * TICK_NS),
    st.sampled_from([0, 1, TICK_NS - 1, TICK_NS, TICK_NS + 1, 63 * TICK_NS, 64 * TICK_NS + 1]),
    st.integers(0, 5000 * TICK_NS),
)


class ExactMachine(RuleBasedStateMachine):
    timers = Bundle("timers")

    def __init__(self):
        super().__init__()
        self.w = pywheel.ManualWheel(tick=TICK_NS / 1e9)
        self.handles = {}
        self.model = {}  # id -> [when_ns, seq, state] state: pending/ran/cancelled
        self.seq = 0
        self.batch = []  # ids run by the current call, in order
        self.collected = None  # ids set aside by collect_due, or None

    def _schedule(self, when_ns, inner=None):
        ident = len(self.model)
        self.seq += 1
        self.model[ident] = [when_ns, self.seq, "pending"]

        def cb():
            now = self.w.time_ns()
            assert now >= self.model[ident][0], "ran early"
            assert self.model[ident][2] == "pending"
            self.model[ident][2] = "ran"
            self.batch.append(ident)
            if inner is not None:  # maybe into the past: waits for the next call
                self._schedule(now + inner - 2 * TICK_NS)

        self.handles[ident] = self.w.call_at(when_ns / 1e9, cb)
        self.model[ident][0] = round(self.handles[ident].when() * 1e9)
        return ident

    @rule(target=timers, off=offsets_ns)
    def call_at(self, off):
        return self._schedule(self.w.time_ns() + off)

    @rule(target=timers, off=offsets_ns, inner=st.integers(0, 4 * TICK_NS))
    def call_at_that_schedules(self, off, inner):
        return self._schedule(self.w.time_ns() + off, inner)

    @rule(ident=timers)
    def cancel(self, ident):
        got = self.handles[ident].cancel()
        assert got is (self.model[ident][2] == "pending")
        if got:
            self.model[ident][2] = "cancelled"

    @rule(ident=timers, off=offsets_ns)
    def reschedule(self, ident, off):
        when = self.w.time_ns() + off
        got = self.handles[ident].reschedule(when / 1e9)
        assert got is (self.model[ident][2] == "pending")
        if got:  # a new place among equal deadlines, as a new scheduling
            self.seq += 1
            self.model[ident][:2] = [round(self.handles[ident].when() * 1e9), self.seq]

    @rule(ident=timers, off=offsets_ns)
    def collect_reschedule_run(self, ident, off):
        """A timer set aside by collect_due() and moved before it ran runs
        at its new deadline instead (the batch skips it)."""
        target = self.w.time_ns() + off
        due = self._due(target)
        self.batch = []
        assert self.w.collect_due(target / 1e9) == len(due)
        moved = self.handles[ident].reschedule_later(1.0)
        assert moved is (self.model[ident][2] == "pending")
        if moved:
            self.seq += 1
            self.model[ident][:2] = [round(self.handles[ident].when() * 1e9), self.seq]
            due = [i for i in due if i != ident]
        assert self.w.run_collected() == len(due)
        assert self.batch == due

    def _due(self, target):
        pending = [(m[0], m[1], i) for i, m in self.model.items() if m[2] == "pending"]
        return [i for w, s, i in sorted(pending) if w <= target]

    def _run(self, target, split):
        due = self._due(target)
        self.batch = []
        if split:
            n = self.w.collect_due(target / 1e9)
            assert n == len(due)
            # a cancel between the halves is honoured
            if due and due[0] % 3 == 0:
                assert self.handles[due[0]].cancel() is True
                self.model[due[0]][2] = "cancelled"
                due = due[1:]
            ran = self.w.run_collected()
        else:
            ran = self.w.run_due(target / 1e9)
        assert self.batch == due, (self.batch, due)
        assert ran == len(due)

    @rule(step=offsets_ns, split=st.booleans())
    def run_due(self, step, split):
        self._run(self.w.time_ns() + step, split)

    @rule(ident=timers, extra=st.sampled_from([0, 0, 1, -1]), split=st.booleans())
    def run_due_onto_a_deadline(self, ident, extra, split):
        target = self.model[ident][0] + extra
        if target >= self.w.time_ns():
            self._run(target, split)

    @invariant()
    def next_when_is_the_least_pending_deadline(self):
        pending = [m[0] for m in self.model.values() if m[2] == "pending"]
        got = self.w.next_when()
        if not pending:
            assert got is None
        else:
            want = min(pending)
            if want <= self.w.time_ns():
                assert got is not None and round(got * 1e9) <= self.w.time_ns()
            else:
                assert got is not None and round(got * 1e9) == want

    @invariant()
    def counters(self):
        s = self.w.stats()
        assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
        assert s["pending"] == sum(m[2] == "pending" for m in self.model.values())

    def teardown(self):
        left = self.w.close()
        assert all(h.cancelled() for h in left)


TestExact = ExactMachine.TestCase


def test_a_timer_runs_when_the_clock_reaches_its_exact_deadline():
    w = pywheel.ManualWheel(tick=0.001)
    ran = []
    w.call_at(0.0105, ran.append, "late")
    w.call_at(0.0101, ran.append, "early")
    assert w.next_when() == 0.0101 and w.next_deadline() == 0.011  # deadline vs tick
    assert w.run_due(0.0100999) == 0  # one nanosecond before: never early
    assert w.run_due(0.0101) == 1 and ran == ["early"]  # frozen exactly at the deadline
    assert w.next_when() == 0.0105
    assert w.run_due(0.0106) == 1 and ran == ["early", "late"]
    assert w.next_when() is None
    w.close()


def test_collected_timers_left_unrun_come_first_next_time():
    w = pywheel.ManualWheel()
    ran = []
    w.call_at(1.0, ran.append, 1)
    assert w.collect_due(1.5) == 1
    w.call_at(1.2, ran.append, 2)
    assert len(w) == 2 and w.next_when() == 1.0  # the set-aside one: due, its own when()
    assert w.run_due(2.0) == 2 and ran == [1, 2]  # put back in its place, then run
    assert w.collect_due(3.0) == 0 and w.run_collected() == 0
    w.close()


def test_closing_with_timers_set_aside_cancels_and_releases_them():
    import sys

    w = pywheel.ManualWheel()
    payload = object()
    before = sys.getrefcount(payload)
    h = w.call_at(1.0, print, payload)
    w.collect_due(1.0)
    assert w.close() == [h] and h.cancelled()
    assert sys.getrefcount(payload) == before
    assert w.run_collected() == 0
