"""``pytest --virtual-time``: every event loop the session makes is a
``VirtualEventLoop``; ``--timing-fuzz=N`` reruns each async test under drawn
Timings, reproducibly (no hypothesis).

How loops are switched over.  Every way a suite gets a loop ends in one of
two places: ``asyncio.events.new_event_loop()`` (``asyncio.run``,
``asyncio.Runner`` without ``loop_factory`` -- pytest-asyncio 1.x's runner
fixtures, anyio's asyncio backend, ``IsolatedAsyncioTestCase`` --, and any
direct ``asyncio.new_event_loop()``), or a default policy's
``new_event_loop()`` method, which calls its class's ``_loop_factory``
(``asyncio.get_event_loop()`` on 3.11, code holding the policy object).  For
the session both are replaced: the module functions ``asyncio.new_event_loop``
and ``asyncio.events.new_event_loop`` (looked up at call time by Runner and
asyncio.run, 3.11 through 3.15), and ``_loop_factory`` on the default
policy classes, found in the modules' ``__dict__`` (so 3.14+'s deprecated
names are never touched).  No policy is set or read: nothing here uses the
policy API deprecated in 3.14 and gone in 3.16, and a suite that sets its own
policy or passes its own ``loop_factory`` keeps it.  Everything is put back
at ``pytest_unconfigure``.  What is not reached: a reference to the original
function taken before pytest configured (``from asyncio import
new_event_loop`` in a module imported by a plugin before the session began,
a default argument bound then).

The draw.  A fuzz run of a test is named by a token: the bounds and a 64-bit
seed (from ``--timing-seed``, the test's node id and the run's number, so the
same command draws the same schedules).  Each loop made during the run gets a
``Timing`` whose decisions come from ``random.Random(seed, loop number)``:
the run first picks how often it perturbs (about one decision in 50, 10, 3,
or every one) and each perturbed decision is the bound or a uniform number of
ticks up to it, half and half -- the shapes of fault a loaded machine makes:
rare large hiccups, or a steady drag.  Given the token, the same program
meets the same decisions, so ``--timing-replay=TOKEN`` reruns exactly that
schedule.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import random
import sys
import threading
import weakref
from asyncio import events as _events
from typing import Any

from .._tracebacks import hide as __tracebackhide__  # noqa: F401  (pytest: see there)
from ._timing import Timing, _check_max, encode_token, parse_token  # noqa: F401 (_check_max: the plugin)

#: How often a run perturbs a decision: one of these, drawn per run.
_RATES = (0.02, 0.1, 0.3, 1.0)


class Schedule:
    """One fuzz run's draw: bounds and seed; ``token`` names it."""

    __slots__ = ("max_late", "max_cost", "max_jitter", "seed")

    def __init__(self, max_late: float, max_cost: float, max_jitter: float, seed: int) -> None:
        self.max_late = max_late
        self.max_cost = max_cost
        self.max_jitter = max_jitter
        self.seed = seed

    @property
    def token(self) -> str:
        return f"{self.max_late!r},{self.max_cost!r},{self.max_jitter!r},{self.seed:016x}"

    @classmethod
    def parse(cls, token: str) -> Schedule | Scripted:
        """The run a replay token names: a seed's draw (a fuzz run) or the
        decisions themselves (a minimized run).  ValueError saying what is
        wrong with the token, in words (see ``_timing.parse_token``)."""
        try:
            kind, bounds, what = parse_token(token)
        except ValueError as exc:
            raise ValueError(
                f"--timing-replay={token!r} is not a token from a --timing-fuzz report "
                f"(nor a Timing's .token): {exc}"
            ) from None
        if kind == "seed":
            return cls(*bounds, what)
        return Scripted(bounds, what)

    def timing(self, index: int) -> Timing:
        rng = random.Random(f"{self.seed:016x}/{index}")
        rate = rng.choice(_RATES)

        def draw(n: int) -> int:
            if rng.random() >= rate:
                return 0
            return n if rng.random() < 0.5 else rng.randint(1, n)

        return Timing(
            max_late=self.max_late, max_cost=self.max_cost, max_jitter=self.max_jitter, draw=draw
        )


# ---- bounds that fit the program: the escalation ladder ---------------------
#
# ``--timing-escalate=TOP``: the N runs of a test climb a ladder of levels,
# multiples of the given (or default) bounds, 1, 2.5, 5, 10, 25, ... up to
# TOP, in blocks (the runs are split as evenly as they go, lowest level
# first); run k keeps the seed it has without the option, so the runs at
# level 1 are exactly the fixed-bounds runs, and a test's runs are the same
# for the same command.  Because the runs climb, the first failure is at
# the smallest level that broke the test among those tried, and the report
# names it: that level is the answer to "how large must the bounds be", and
# the user can judge it against the program's own timeouts (a failure that
# needs the loop to stall for as long as the test's own 100 ms deadline is
# the machine being slower than the test allows, not a race).  Each run's
# token carries its own (scaled) bounds: the replay needs nothing else.
#
# Left for later, deriving the bounds from the timers the punctual run 0
# arms: a test's timers mix the delays that race (a 100 ms keepalive) with
# guards meant never to fire (a 10 s wait_for, a pool's 3600 s recycling),
# and a wrong guess is silent (too small: no signal) or loud (too large:
# every guard fires); it would also need a hook on every timer of the
# punctual run.  On six real suites (benchmarks/fuzz_bounds.py --timers)
# every failure the ladder found was a margin of the test's own, at a
# max_late of half the shortest timer the test armed or more, but the
# synthetic lease race of tests/test_timing_escalate.py breaks at 0.43 of
# its own: no line a derivation could draw.  The ladder spans the range in a
# handful of runs, is a pure function of the seed, and states its answer in
# the units the user set.  Off by default: with it, a level's bounds can exceed
# what a test's own deadlines tolerate, and that failure is for the user to
# judge, not for a plain ``--timing-fuzz`` run to raise.

#: The ladder's steps below TOP (TOP itself is always the last level).
_STEPS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0)
#: The largest TOP accepted (the defaults times 1000: a 20 s late wake-up).
MAX_ESCALATE = 1000.0


class Rung(Schedule):
    """A schedule of an escalating fuzz: its ``level`` (the factor its bounds
    are of the base bounds), ``index`` among the ``levels`` and the ``runs``
    (first, last) each level got."""

    __slots__ = ("level", "levels", "index", "runs")

    def describe(self) -> str:
        """The report's line: the level that broke the test, and those passed."""
        names = ", ".join(f"x{f:g}" for f, _ in self.levels)
        line = (
            f"bounds at level x{self.level:g} of the ladder {names} (max_late="
            f"{self.max_late!r}, max_cost={self.max_cost!r}, max_jitter={self.max_jitter!r}): "
            f"the smallest level that broke the test"
        )
        below = [(f, r) for f, r in self.levels[: self.index] if r is not None]
        if below:
            passed = ", ".join(f"x{f:g} (runs {a}-{b})" if a != b else f"x{f:g} (run {a})"
                               for f, (a, b) in below)  # fmt: skip
            line += f"; passed at {passed}"
        return (
            line + ": a margin exceeded, the program's (a race on a loaded machine) or "
            "the test's own (an assertion of how long something takes): see 'Size the "
            "bounds to the program' in the docs (docs/howto/real-suites.md)"
        )


def ladder(top: float) -> list[float]:
    """The levels up to ``top`` (>= 1): 1, 2.5, 5, 10, 25, ... below it, then it."""
    return [f for f in _STEPS if f < top] + [float(top)]


def schedules(
    bounds: tuple[float, float, float],
    seed: int,
    nodeid: str,
    runs: int,
    escalate: float | None = None,
) -> list[Schedule]:
    """The ``runs`` fuzz runs of one test (the punctual run 0 not included):
    each ``bounds`` (``escalate`` None), or climbing the ladder up to
    ``escalate`` times them (see above)."""
    late, cost, jitter = bounds
    seeds = [seed_for(seed, nodeid, k) for k in range(1, runs + 1)]
    if escalate is None:
        return [Schedule(late, cost, jitter, s) for s in seeds]
    factors = ladder(escalate)
    n = len(factors)
    if runs >= n:  # blocks, lowest first: every level gets runs // n or one more
        index = [k * n // runs for k in range(runs)]
    else:  # fewer runs than levels: spread them, the first and the top kept
        index = [round(k * (n - 1) / (runs - 1)) if runs > 1 else 0 for k in range(runs)]
    spans: list = [None] * n
    for k, i in enumerate(index, 1):
        spans[i] = (spans[i][0] if spans[i] else k, k)
    levels = tuple(zip(factors, spans, strict=True))
    out: list[Schedule] = []
    for k, s in enumerate(seeds):
        f = factors[index[k]]
        rung = Rung(round(late * f, 9), round(cost * f, 9), round(jitter * f, 9), s)
        rung.level, rung.levels, rung.index = f, levels, index[k]
        rung.runs = spans[index[k]]
        out.append(rung)
    return out


class Scripted:
    """A run whose loops play given decisions instead of drawing them (a
    minimized run, its token replayed, minimize()'s reruns): loop i, in the
    order loops take Timings, gets ``items[i]`` -- a Timing object itself
    (minimize() reads what that run decided from it), or a script, (kind,
    index) -> seconds, played by a fresh Timing --, a loop past them a
    punctual one.  Same surface as ``Schedule``."""

    __slots__ = ("max_late", "max_cost", "max_jitter", "items")

    def __init__(self, bounds: tuple[float, float, float], items: list) -> None:
        self.max_late, self.max_cost, self.max_jitter = bounds
        self.items = list(items)

    @property
    def bounds(self) -> tuple[float, float, float]:
        return (self.max_late, self.max_cost, self.max_jitter)

    @property
    def token(self) -> str:
        scripts = []
        for item in self.items:
            if isinstance(item, Timing):
                # What it decided if its run is over; else what it was given.
                done = item._state not in ("new", "recording")
                item = item._in_order() if done else dict(item._script or {})
            scripts.append(item)
        return encode_token(self.bounds, scripts)

    def timing(self, index: int) -> Timing:
        item = self.items[index] if index < len(self.items) else {}
        if isinstance(item, Timing):
            return item
        timing = Timing(max_late=self.max_late, max_cost=self.max_cost, max_jitter=self.max_jitter)
        timing._script = dict(item)
        return timing


def seed_for(base: int, nodeid: str, run: int) -> int:
    digest = hashlib.blake2b(f"{base}\0{nodeid}\0{run}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Context:
    """What loops get during one run of one test (its setup, call and
    teardown): the per-test limit, the clocks default, and in a fuzz run the
    schedule its Timings are drawn from.

    Which loops a fuzz run perturbs.  The run's Timings reach the loops that
    run while the test's *own part* runs (``active``): from the setup of its
    function-scoped fixtures through its call to their teardown (the plugin's
    span fixture, the first function-scoped fixture set up and the last torn
    down, marks it).  A loop made then takes the next Timing when it is made;
    a loop made before (a module- or session-scoped loop, made by an earlier
    run or test) is lent the next Timing when it starts running in that part
    and gives it back at its end (``VirtualEventLoop._lend_timing``).  Timings
    are numbered in the order loops take them, so the same program takes the
    same draws.  Fixtures of a wider scope are set up and torn down outside
    that part, punctually, in every run: whether they are set up in this run
    (the test is the first of its module, the last, or alone in a replay) or
    an earlier one does not change what the run perturbs, which is what
    lets ``--timing-replay`` of one test reproduce a run of the fuzz.

    Rejected: tearing the wider fixtures down and setting them up again for
    each fuzz run, so that every loop is made inside the run (a session
    fixture that starts a server would start N + 1 times per test); and
    lending the Timing to every open loop when the run starts (a loop of
    another module's fixtures would take draws, and the numbering would
    depend on which loops happen to be open, which a replay cannot know)."""

    __slots__ = ("limit", "limit_given", "clocks", "schedule", "loops", "timed", "ran")
    __slots__ += ("active", "thread")
    __slots__ += ("_draws", "failure", "end_times", "__weakref__")
    __slots__ += ("traces", "_traced_lent")

    def __init__(self, limit: float | None, clocks: bool, schedule: Schedule | None) -> None:
        self.limit = limit  # None: no limit
        self.limit_given = True  # False: the plugin's default (see make_loop)
        self.clocks = clocks
        self.schedule = schedule
        self.loops: list = []  # weakrefs of the loops made, in the order they were made
        # (weakref to the loop, its Timing, lent?) in the order loops took one
        self.timed: list = []
        # ids of the loops with a Timing that ran (ids, not weak references:
        # the count must outlive the run's loops, collected when it ends)
        self.ran: set[int] = set()
        self.active = schedule is None  # a punctual run has no span to wait for
        self.thread = threading.get_ident()
        self._draws = 0
        # A list: each loop of the run records a testing.Trace into it (the
        # plugin's rerun of a failure; see pytest_plugin._trace_failure).
        self.traces: list | None = None
        self._traced_lent: list = []  # loops lent a Trace for this run
        # How the run first failed: (phase, exception type), or None.  A
        # minimized run must fail the same way (the plugin's _minimize).
        self.failure: tuple[str, type] | None = None
        # virtual_times() as the run ended (the plugin reports a run after
        # others ran, when its loops may be collected).
        self.end_times: list[float] | None = None

    def _draw(self) -> Timing:
        assert self.schedule is not None
        timing = self.schedule.timing(self._draws)
        self._draws += 1
        return timing

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"clocks": self.clocks}
        if quantum is not None:
            kw["quantum"] = quantum
        if self.limit is not None:
            kw["limit"] = self.limit
        if self.schedule is not None and self.active:
            kw["timing"] = self._draw()
        if self.traces is not None:
            from ._trace import Trace

            kw["trace"] = trace = Trace(f"loop {len(self.traces)}")
            self.traces.append(trace)
        return kw

    def made(self, loop) -> None:
        self.loops.append(weakref.ref(loop))
        timing = loop._timing
        if timing is not None and self.schedule is not None:
            self.timed.append((weakref.ref(loop), timing, False))

    def loop_runs(self, loop) -> None:
        """``loop`` is about to run (``VirtualEventLoop.run_forever``)."""
        if self.traces is not None and loop._trace is None and self.active:
            self._lend_trace(loop)
        if not self.active or self.schedule is None:
            return
        if loop._timing is None:
            if threading.get_ident() != self.thread:
                # Only in the test's thread: a loop lent a Timing must give
                # it back when the test's part ends, and one running on
                # another thread might still be running then.
                return
            timing = self._draw()
            loop._lend_timing(timing)
            self.timed.append((weakref.ref(loop), timing, True))
        self.ran.add(id(loop))

    def _lend_trace(self, loop) -> None:
        """A loop made before the run records it while the run lasts."""
        if threading.get_ident() != self.thread:
            return
        from . import _trace

        trace = _trace.attach(loop, _trace.Trace(f"loop {len(self.traces)}"))
        self.traces.append(trace)
        self._traced_lent.append(weakref.ref(loop))

    def begin(self) -> None:
        """The test's own part starts (a fuzz run's span fixture)."""
        self.active = True

    def end(self) -> None:
        """The test's own part ended: lent Timings go back (idempotent)."""
        if self._traced_lent:
            from . import _trace

            for ref in self._traced_lent:
                loop = ref()
                if loop is not None and not loop.is_running():
                    _trace.detach(loop)
            self._traced_lent = []
        if self.schedule is None:
            return
        self.active = False
        for ref, timing, lent in self.timed:
            loop = ref()
            if lent and loop is not None and loop._timing is timing and not loop.is_closed():
                loop._return_timing()

    def lent(self) -> bool:
        return any(lent for _, _, lent in self.timed)

    def virtual_times(self) -> list[float]:
        """The virtual time of each loop the run made or lent a Timing to."""
        refs = list(self.loops) + [ref for ref, _, lent in self.timed if lent]
        return [loop.time() for ref in refs if (loop := ref()) is not None]

    def made_any(self) -> bool:
        return bool(self.loops)


#: The running test's context (None between tests: loops get the defaults).
current: Context | None = None
#: Session defaults, for loops made outside a test (session fixtures).
session_clocks = True
session_limit: float | None = None
session_limit_given = False  # False: session_limit is the plugin's default
#: Loops whose limit is the plugin's: each test gives them a fresh budget.
_limited: weakref.WeakSet = weakref.WeakSet()


def enter(ctx: Context) -> Context | None:
    """Make ``ctx`` the current one (returns the one it replaces).  Loops
    that outlive a test (module or session scope) and took their limit from
    the plugin may again pass ``ctx.limit`` virtual seconds from now: the
    limit is per test, not per loop."""
    global current
    saved, current = current, ctx
    limit = math.inf if ctx.limit is None else ctx.limit
    for loop in list(_limited):
        if not loop.is_closed():
            loop._set_limit(limit)
    return saved


def limited(loop) -> None:
    """``loop``'s limit is the plugin's (renewed for each test)."""
    _limited.add(loop)


def _loop_runs(loop) -> None:
    ctx = current
    if ctx is not None:
        ctx.loop_runs(loop)


#: --virtual-time-quantum (None: the loop's default), for every loop.
quantum: float | None = None


def make_loop(**overrides: Any):
    from ._loop import VirtualEventLoop

    ctx = current
    if ctx is not None:
        kwargs = ctx.kwargs()
        given = ctx.limit_given
    else:
        kwargs = {"clocks": session_clocks}
        if quantum is not None:
            kwargs["quantum"] = quantum
        if session_limit is not None:
            kwargs["limit"] = session_limit
        given = session_limit_given
    # The default limit is for the loop a test waits on.  A loop made on
    # another thread (a server or portal running its own loop for the
    # session) does not hold the test up when it spins, but would die of
    # the limit and take its service with it: it gets a limit only when
    # one was asked for (option, ini file, marker).
    on_main = threading.current_thread() is threading.main_thread()
    if not given and not on_main:
        kwargs.pop("limit", None)
    kwargs.update(overrides)
    loop = VirtualEventLoop(**kwargs)
    if "limit" not in overrides and (given or on_main):
        limited(loop)
    if ctx is not None:
        ctx.made(loop)
    return loop


def _policy_classes():
    import asyncio.unix_events as unix

    mods = [unix]
    try:
        import asyncio.windows_events as win  # noqa: F401

        mods.append(win)
    except ImportError:
        pass
    for mod in mods:
        for value in list(vars(mod).values()):
            if isinstance(value, type) and "_loop_factory" in vars(value):
                yield value


_saved: list | None = None


def install() -> None:
    """Make every new event loop a VirtualEventLoop (until ``uninstall``)."""
    global _saved
    if _saved is not None:
        return
    saved = [
        (asyncio, "new_event_loop", asyncio.new_event_loop),
        (_events, "new_event_loop", _events.new_event_loop),
    ]
    for cls in _policy_classes():
        saved.append((cls, "_loop_factory", vars(cls)["_loop_factory"]))
    _saved = saved

    def new_event_loop():
        return make_loop()

    new_event_loop.__doc__ = "pytest --virtual-time: a pywheel.testing.VirtualEventLoop."
    asyncio.new_event_loop = new_event_loop
    _events.new_event_loop = new_event_loop
    for cls, _name, _old in saved[2:]:
        cls._loop_factory = staticmethod(new_event_loop)


def uninstall() -> None:
    global _saved
    saved, _saved = _saved, None
    for owner, name, old in saved or ():
        setattr(owner, name, old)


def is_async_test(item) -> bool:
    obj = getattr(item, "obj", None)
    if obj is None:
        return False
    if inspect.iscoroutinefunction(obj):
        return True
    wrapped = getattr(obj, "__wrapped__", None)  # pytest-asyncio's sync wrapper
    return wrapped is not None and inspect.iscoroutinefunction(wrapped)


def watch_runs(on: bool) -> None:
    """Tell the session each time a VirtualEventLoop starts running (a fuzz
    run counts them, and lends a Timing to one made before the test)."""
    if not on and "pywheel.testing._loop" not in sys.modules:
        return  # nothing to undo: never imported
    from . import _loop

    _loop.on_run = _loop_runs if on else None
