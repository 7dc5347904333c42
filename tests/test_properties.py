"""Hypothesis against the ordering rules, at two depths.

CoreMachine drives the pure C wheel through cffi against a sorted-list model,
with the core's own checker as an invariant.  ManualMachine drives the whole
binding through ManualWheel.  Then exhaustive boundary sweeps, a real-clock
property on the threaded Wheel, and the proof that all this notices a broken
wheel.  Profiles (tests/conftest.py): PYWHEEL_HYPOTHESIS=deep for long runs.
"""

import math
import threading
import time

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

import pywheel

wheel_cffi = pytest.importorskip("wheel_cffi")
TICK_MAX = wheel_cffi.TICK_MAX
LEVEL = [64**k for k in range(7)]  # span of each level, and the overflow boundary 64**6

# Offsets that sit on or beside a level or round boundary.
BOUNDARIES = sorted(
    {
        b + e
        for b in [1, 63, 64, 4095, 4096, 262143, 262144, 64**4, 64**5, 64**6]
        for e in (-1, 0, 1)
    }
    | {2**40, 2**50, 2**63}
)
offsets = st.one_of(
    st.integers(0, 8),
    st.sampled_from(BOUNDARIES),
    st.integers(0, 70),
    st.integers(0, 5000),
    st.integers(0, 2**38),
    st.integers(0, 2**64 - 1),
)
starts = st.one_of(
    st.just(0),
    st.sampled_from([63, 64, 4095, 4096, 64**6 - 3, 2**40 - 1]),
    st.integers(0, 2**40),
    st.just(TICK_MAX - 2**40),
    st.integers(TICK_MAX - 2**20, TICK_MAX - 2),
)


# the owner's order within a tick: mostly none, sometimes ties, sometimes the extremes
subs = st.one_of(st.just(0), st.integers(0, 2), st.sampled_from([2**31, 2**32 - 1]))


class CoreMachine(RuleBasedStateMachine):
    """The C wheel against a model: a dict of linked timers and the pop log."""

    timers = Bundle("timers")

    def __init__(self, defines=()):
        super().__init__()
        self.defines = defines

    @initialize(start=starts)
    def start(self, start):
        self.w = wheel_cffi.Wheel(start, defines=self.defines)
        self.model = {}  # id -> (deadline, seq) while linked
        self.cdata = {}  # id -> pw_timer*
        self.seq = 0
        self.ids = 0

    @property
    def now(self):
        return self.w.now()

    @rule(target=timers, offset=offsets, past=st.booleans(), sub=subs)
    def add(self, offset, past, sub):
        deadline = max(0, self.now - offset) if past else min(TICK_MAX, self.now + offset)
        ident = self.ids
        self.ids += 1
        self.cdata[ident] = self.w.add(ident, deadline, sub)
        self.model[ident] = (deadline, sub, self.seq)
        self.seq += 1
        return ident

    @rule(ident=timers)
    def cancel(self, ident):
        assert self.w.cancel(self.cdata[ident]) == (ident in self.model)
        self.model.pop(ident, None)

    @rule(ident=timers, way=st.sampled_from(["later", "earlier", "past"]), offset=offsets, sub=subs)
    def move(self, ident, way, offset, sub):
        """A later move is only recorded (the timer stays where it was filed);
        every invariant must hold all the same."""
        if ident not in self.model:
            return
        old = self.model[ident][0]
        base = {"later": old + offset, "earlier": old - offset, "past": self.now - offset}
        deadline = min(TICK_MAX, max(0, base[way]))
        self.w.move(self.cdata[ident], deadline, sub)
        self.model[ident] = (deadline, sub, self.seq)
        self.seq += 1

    @rule(ident=consumes(timers))
    def cancel_and_forget(self, ident):
        self.cancel(ident)

    def due(self):
        return sorted((d, sub, s, i) for i, (d, sub, s) in self.model.items() if d <= self.now)

    @rule(k=st.integers(1, 4))
    def pop_some(self, k):
        """Pops a few, leaving others expired: later adds interleave with them."""
        for _ in range(k):
            self.pop_one()

    def pop_one(self):
        due = self.due()
        got = self.w.pop()
        if not due:
            assert got is None
            return
        assert got is not None, f"{len(due)} due timers, pop returned nothing"
        ident, deadline, sub, seq = got
        assert (deadline, sub, seq, ident) == due[0], "popped out of (deadline, sub, seq) order"
        assert deadline <= self.now, "popped before its deadline"
        del self.model[ident]

    @rule(step=offsets, pop=st.booleans())
    def advance(self, step, pop):
        target = min(self.now + step, TICK_MAX - 1)
        self.w.advance(target)
        assert self.now == max(target, self.now)
        if pop:
            self.pop_all()

    @rule()
    def advance_to_next(self):
        nxt = self.w.next()
        if nxt < TICK_MAX - 1:
            self.w.advance(max(nxt, self.now))
            self.pop_all()

    def pop_all(self):
        while self.due():
            self.pop_one()
        assert self.w.pop() is None  # completeness: nothing due is left behind

    @invariant()
    def checker_agrees(self):
        if hasattr(self, "w"):
            problem = self.w.check()
            assert problem is None, problem

    @invariant()
    def counts_and_next_deadline(self):
        if hasattr(self, "w"):
            assert self.w.count() == len(self.model)
            want = min((d for d, _, _ in self.model.values()), default=TICK_MAX)
            assert self.w.next() == want


TestCore = CoreMachine.TestCase
TestCore.settings = settings(stateful_step_count=60)


# ---- the whole binding, through ManualWheel --------------------------------

TICK_NS = 1_000_000  # 1 ms
delays_ns = st.one_of(
    st.integers(0, 5).map(lambda k: k * TICK_NS),
    st.integers(-3 * TICK_NS, 70 * TICK_NS),
    st.sampled_from([63, 64, 65, 4095, 4096, 4097]).map(lambda k: k * TICK_NS),
    st.integers(0, 10**4).map(lambda k: k * 1000),  # µs steps: many in one tick
)


class ManualMachine(RuleBasedStateMachine):
    """Every rule of DESIGN.md's ordering contract, through the real binding."""

    handles = Bundle("handles")

    def __init__(self):
        super().__init__()
        self.w = pywheel.ManualWheel(tick=TICK_NS / 1e9)
        self.w.set_exception_handler(self._on_error)
        self.events = 0  # a clock of scheduling and running events
        self.info = {}  # id -> dict(when, sched_ns, sched_ev, interval, first, cancelled)
        self.runs = []  # (id, run_ns, when_ns, event, sched_event) in the order they ran
        self.errors = []
        self.handle_of = {}
        self.in_callback = False
        self.settled_ev = 0  # event count when the last advance returned
        self.checked = 0  # runs before this index were checked
        self.group_start = 0  # first run of the latest run time
        self.seen = {}  # id -> event of its latest run
        self.last_run_ev = {}  # repeating id -> event of its latest run

    def _on_error(self, wheel, context):
        self.errors.append(context)

    def tick_time(self, ns):
        return -(-ns // TICK_NS) * TICK_NS

    def schedule(self, delay_ns, interval_ns=None, action=None):
        ident = len(self.info)
        now = self.w.time_ns()
        self.events += 1

        def callback():
            h = self.handle_of[ident]
            self.events += 1
            # the scheduling this run answers: the first, or the re-arm after
            # the previous run
            sched_ev = self.last_run_ev.get(ident, self.info[ident]["sched_ev"])
            self.last_run_ev[ident] = self.events
            self.runs.append(
                (ident, self.w.time_ns(), round(h.when() * 1e9), self.events, sched_ev)
            )
            if action:
                self.in_callback = True
                try:
                    action(ident)
                finally:
                    self.in_callback = False

        if interval_ns is None:
            h = self.w.call_later(delay_ns / 1e9, callback)
        else:
            h = self.w.call_every(interval_ns / 1e9, callback, first=delay_ns / 1e9)
        self.handle_of[ident] = h
        when = round(h.when() * 1e9)
        assert abs(when - (now + delay_ns)) <= 1, "deadline not kept to the nanosecond"
        self.info[ident] = dict(
            when=when,
            sched_ns=now,
            sched_ev=self.events,
            interval=interval_ns,
            first=when,
            cancelled=False,
            from_callback=self.in_callback,
        )
        return ident

    @rule(target=handles, delay=delays_ns)
    def call_later(self, delay):
        return self.schedule(delay)

    @rule(target=handles, first=delays_ns, interval=st.integers(1, 50).map(lambda k: k * 250_000))
    def call_every(self, first, interval):
        # intervals of at least a tick: each run gets a tick of its own
        return self.schedule(first, max(interval, TICK_NS))

    @rule(target=handles, delay=delays_ns, inner=delays_ns)
    def call_later_that_schedules(self, delay, inner):
        """Its callback schedules another timer, maybe into the past."""
        return self.schedule(delay, action=lambda _: self.schedule(inner - 2 * TICK_NS))

    @rule(target=handles, delay=delays_ns, victim=handles)
    def call_later_that_cancels(self, delay, victim):
        def action(_):
            if self.handle_of[victim].cancel():
                self.info[victim]["cancelled"] = True

        return self.schedule(delay, action=action)

    @rule(target=handles, delay=delays_ns, interval=st.integers(1, 5).map(lambda k: k * TICK_NS))
    def repeating_that_cancels_itself(self, delay, interval):
        def action(ident):
            if sum(1 for r in self.runs if r[0] == ident) == 3:
                assert self.handle_of[ident].cancel() is True
                self.info[ident]["cancelled"] = True

        return self.schedule(delay, interval, action=action)

    @rule(ident=handles)
    def cancel(self, ident):
        info = self.info[ident]
        ran = any(r[0] == ident for r in self.runs)
        result = self.handle_of[ident].cancel()
        if info["cancelled"] or (ran and info["interval"] is None):
            assert result is False
        else:
            assert result is True
        info["cancelled"] = info["cancelled"] or result

    @rule(ident=handles, delay=delays_ns, absolute=st.booleans())
    def reschedule(self, ident, delay, absolute):
        """Moves a deadline: True only for a timer still pending; the moved
        timer then obeys every rule as a new scheduling at this moment."""
        info = self.info[ident]
        h = self.handle_of[ident]
        now = self.w.time_ns()
        ran = any(r[0] == ident for r in self.runs)
        pending = not info["cancelled"] and (info["interval"] is not None or not ran)
        if absolute:
            got = h.reschedule((now + delay) / 1e9)
        else:
            got = h.reschedule_later(delay / 1e9)
        assert got is pending
        if got:
            self.events += 1
            when = round(h.when() * 1e9)
            assert abs(when - (now + delay)) <= 1, "deadline not kept to the nanosecond"
            info.update(when=when, first=when, sched_ns=now, sched_ev=self.events)
            info["from_callback"] = False
            self.last_run_ev.pop(ident, None)

    @rule(step=st.one_of(st.integers(0, 3 * TICK_NS), st.integers(0, 5000 * TICK_NS)))
    def advance(self, step):
        before = len(self.runs)
        ran = self.w.advance(step / 1e9)
        assert ran == len(self.runs) - before
        self.settled_ev = self.events

    @rule()
    def advance_to_next(self):
        nxt = self.w.next_deadline()
        before = len(self.runs)
        ran = self.w.advance_to_next()
        assert ran == len(self.runs) - before
        self.settled_ev = self.events
        if nxt is not None:
            assert ran >= 1
            assert abs(self.w.time() - nxt) < 1e-9

    @invariant()
    def contract(self):
        """Checks the runs since the last check (each run is checked once, so
        long runs stay linear), then completeness and the counters."""
        now = self.w.time_ns()
        for j in range(self.checked, len(self.runs)):
            ident, run_ns, when_ns, ev, sched_ev = self.runs[j]
            info = self.info[ident]
            assert run_ns >= when_ns, "ran early"
            if info["interval"] is None:
                assert ident not in self.seen, "a one-shot ran twice"
                assert when_ns == info["when"]
            else:
                k, rem = divmod(when_ns - info["first"], info["interval"])
                assert rem == 0 and k >= 0, "repeating run off first + k*interval"
            # at its own tick, or at once if scheduled into the past
            assert run_ns == max(self.tick_time(when_ns), info["sched_ns"])
            self.seen[ident] = ev
            if j and self.runs[j - 1][1] != run_ns:
                assert self.runs[j - 1][1] < run_ns, "time went backwards between runs"
                self.group_start = j
            # order inside one tick: of two runs whose timers were both
            # pending when the batch began, the earlier exact deadline (then
            # the earlier scheduling) ran first
            for i in range(self.group_start, j):
                _, _, wa, eva, sa = self.runs[i]
                if self.pending_at_batch_start(ident, sched_ev, eva, run_ns):
                    assert (wa, sa) < (when_ns, sched_ev), f"run {i} and {j} out of order"
        self.checked = len(self.runs)
        # completeness: a live one-shot whose tick had come by the end of the
        # last advance has run (one scheduled since is not due till the next)
        for ident, info in self.info.items():
            if (
                info["interval"] is None
                and not info["cancelled"]
                and info["sched_ev"] <= self.settled_ev
            ):
                due = max(self.tick_time(info["when"]), info["sched_ns"]) <= now
                ran = ident in self.seen
                assert due == ran, f"timer {ident} due={due} ran={ran}"
        s = self.w.stats()
        assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"]
        assert s["fired"] == len(self.runs)
        assert not self.errors, self.errors

    def pending_at_batch_start(self, ident, sched_ev, run_ev, run_ns):
        """Was this scheduling pending when the batch that ran event run_ev
        (at time run_ns) began?  A timer scheduled by a callback of that batch
        (into the past or onto the current tick) belongs to the next batch, by
        contract; a re-armed repeating timer's next run is a tick later."""
        info = self.info[ident]
        if sched_ev > run_ev or info["interval"] is not None:
            return False
        if info["from_callback"]:
            return info["sched_ns"] < run_ns
        return info["sched_ns"] <= run_ns

    def teardown(self):
        pending = self.w.close()
        assert all(h.cancelled() for h in pending)
        assert len(self.w) == 0


TestManual = ManualMachine.TestCase
TestManual.settings = settings(stateful_step_count=40)


# ---- exhaustive sweeps around boundaries ------------------------------------

SWEEP_STARTS = [0, 1, 62, 63, 64, 65, 4031, 4095, 4096, 262143, 262144, 64**5 - 1, 64**6 - 1, 64**6]


@pytest.mark.parametrize("start", SWEEP_STARTS)
def test_boundary_sweep_fires_exactly_at_the_deadline(start):
    """For every start and boundary offset, step up to the deadline in every
    way: one tick at a time near it, one jump to just before, one jump onto
    it, one jump past it.  The timer must fire at the first now >= deadline."""
    offsets = sorted({o for o in BOUNDARIES if o < 2**40} | set(range(0, 130)))
    for off in offsets:
        deadline = start + off
        for approach in ("creep", "jump-before", "onto", "past"):
            w = wheel_cffi.Wheel(start)
            t = w.add(0, deadline)
            w.add(1, deadline + 1)  # a neighbour one tick later
            if approach == "creep":
                for now in range(max(start, deadline - 70), deadline):
                    w.advance(now)
                    assert w.pop() is None, (start, off, now)
                w.advance(deadline)
            elif approach == "jump-before":
                w.advance(max(start, deadline - 1))
                if deadline > start:
                    assert w.pop() is None, (start, off)
                w.advance(deadline)
            elif approach == "onto":
                w.advance(deadline)
            else:
                w.advance(deadline + 1)
            got = w.pop()
            assert got is not None and got[0] == 0 and got[1] == deadline, (start, off, approach)
            assert w.check() is None
            del t


def test_every_pair_of_deadlines_in_two_levels_pops_in_order():
    # All pairs of deadlines within the first 2 levels and a round beyond,
    # scheduled in both orders, advanced in one jump: (deadline, seq) order.
    span = list(range(0, 140)) + [4095, 4096, 4097, 8191, 8192]
    for a in span:
        for b in span[::7]:
            w = wheel_cffi.Wheel(5)
            w.add(0, 5 + a)
            w.add(1, 5 + b)
            w.advance(5 + max(a, b))
            got = [w.pop(), w.pop()]
            want = sorted([(5 + a, 0, 0), (5 + b, 1, 1)])
            assert [(g[1], g[3], g[0]) for g in got] == want


# ---- the real clock -----------------------------------------------------------


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 30_000), min_size=1, max_size=60))
def test_threaded_wheel_never_early_and_in_order(delays_us):
    ran = []
    done = threading.Event()
    with pywheel.Wheel() as w:
        base = w.time() + 0.02  # all scheduled before any is due

        def cb(i):
            ran.append((i, time.monotonic()))
            if len(ran) == len(delays_us):
                done.set()

        handles = [w.call_at(base + d / 1e6, cb, i) for i, d in enumerate(delays_us)]
        assert done.wait(10)
    note(f"ran {ran}")
    for i, t in ran:
        assert t >= handles[i].when(), "ran before its deadline"
    order = [i for i, _ in ran]
    assert order == sorted(range(len(delays_us)), key=lambda i: (handles[i].when(), i))


# ---- the suite catches a broken wheel --------------------------------------


class BrokenCoreMachine(CoreMachine):
    def __init__(self):
        super().__init__(defines=("PW_TEST_BREAK_SLOT",))


def test_suite_catches_an_off_by_one_slot():
    """A wheel compiled with PW_TEST_BREAK_SLOT files timers one slot off:
    the state machine must find a failing schedule."""
    from hypothesis.stateful import run_state_machine_as_test

    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            BrokenCoreMachine,
            settings=settings(
                max_examples=200, stateful_step_count=30, database=None, derandomize=True
            ),
        )


def test_model_helpers_are_sane():
    # the sweep relies on these constants matching the C header
    ffi, lib = wheel_cffi.build()
    assert lib.PW_LEVELS == 6 and lib.PW_LEVEL_BITS == 6
    assert LEVEL[6] == 2**36 and math.log2(LEVEL[1]) == lib.PW_LEVEL_BITS
