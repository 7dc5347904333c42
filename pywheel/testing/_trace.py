"""Trace: what a virtual-time run did, when, in the program's own words.

``VirtualEventLoop(trace=tr)`` / ``run(main(), trace=tr)`` with ``tr =
Trace()`` records, on virtual time:

- each *step* of a task (its start, its end including what a Timing charged
  it, and where the task then waited or how it ended), in the task's lane;
- each *callback* the program scheduled (a timer's, a ``call_soon``'s), in
  a lane named by the callback (its deadline, who armed it);
- each event of the outside world (``call_external`` / ``latency``): when it
  was sent and when it arrived, in a lane named by its call site;
- each time the loop slept to a timer: the deadline and when it woke;
- the Timing's non-zero decisions, on the event each perturbed.

Lanes and events are named with ``_sites``' words (``task 'reader'``,
``Cache._expire()``, ``latency() in load() at cache.py:14``).  asyncio's and
pywheel's own tasks and callbacks go to one lane of internals, which the
picture and the text leave out.

Off (no ``trace=``) it costs nothing: the loop installs none of these hooks.
On, the handles and timer callbacks of the loop are wrapped as a Timing's
are (``_loop._ChargedHandle`` / ``_ChargedTimer``), and a traced run makes
the very same decisions, in the same order, as an untraced one: tracing
reads the clock and the tasks, it never schedules anything.

``Trace.write_perfetto(path, punctual=None)`` writes the Chrome trace-event
JSON (ui.perfetto.dev, chrome://tracing); ``draw_race`` (``_draw``) an SVG of
a punctual run beside a failing one; ``race_timeline`` the text the pytest
plugin prints; ``divergence`` says where two runs first part.
"""

from __future__ import annotations

import json
import os
import re
import weakref
from asyncio import events as _events
from asyncio import tasks as _tasks
from typing import Any

from ._loop import _ChargedHandle, _ChargedTimer
from ._sites import (
    _ASYNCIO,
    _DEFAULT_TASK_NAME,
    _PYWHEEL,
    callback_site,
    internal_callback,
    task_site,
)

__all__ = ["Trace", "Event", "Lane", "Divergence", "divergence", "race_timeline"]

_NUMBER = re.compile(r"\d+")

#: Lane kinds, in the order the picture shows them.
LANE_KINDS = ("task", "callback", "timer", "outside", "loop", "internal")


class Lane:
    """One row of the picture, one thread (``tid``) of the Perfetto trace:
    a task, a callback or timer of the program, a source of the outside
    world, the loop's wake-ups, or asyncio's and pywheel's internals."""

    __slots__ = ("index", "label", "kind", "detail", "key")

    def __init__(self, index: int, label: str, kind: str, detail: str = "", key: str = "") -> None:
        self.index = index
        self.label = label
        self.kind = kind
        self.detail = detail
        # What names the lane across two runs of one program: the label with
        # its numbers as N (a name made from a process-wide counter, as
        # "pool-45-worker-0", differs from run to run) and its place among
        # the lanes of that name ("#2": the second to appear).
        self.key = key or label

    @property
    def internal(self) -> bool:
        return self.kind in ("loop", "internal")

    def __repr__(self) -> str:
        return f"<Lane {self.index} {self.kind} {self.label!r}>"


class Event:
    """One thing that happened: ``kind`` is "step" (a task ran), "callback"
    (a ready callback that is no task step), "timer" (a timer's callback),
    "send" (an outside-world event sent: ``end`` when it is due to arrive),
    "outside" (it arrived: ``start`` sent, ``end`` arrived) or
    "wake" (the loop slept to ``deadline`` and woke at ``end``).  ``where``:
    where a task waits after its step ("get() at cache.py:20", "ended:
    raised KeyError"), or who armed a timer.  ``decision``: the Timing's
    non-zero decision on it, (kind, seconds), or None."""

    __slots__ = ("seq", "kind", "lane", "start", "end", "what", "where", "deadline", "decision")

    def __init__(self, seq, kind, lane, start, end, what, where="", deadline=None, decision=None):
        self.seq = seq
        self.kind = kind
        self.lane = lane
        self.start = start
        self.end = end
        self.what = what
        self.where = where
        self.deadline = deadline
        self.decision = decision

    @property
    def at(self) -> float:
        """When it happened: an outside event when it arrived, a wake-up
        when the loop woke, anything else when it began."""
        return self.end if self.kind in ("outside", "wake") else self.start

    def key(self) -> tuple:
        """What is compared between two runs: which lane, what happened,
        where the task went (never the times)."""
        return (self.lane.key, self.kind, _NUMBER.sub("N", self.what), self.where)

    def describe(self) -> str:
        """One line for people: "timer Cache._expire() ran", "task 'reader'
        step -> get() at cache.py:20", "latency() in load() at x.py:3
        arrived (sent t=0.995)"."""
        lane = self.lane.label
        if self.kind == "step":
            return f"{lane} ran -> {self.where}" if self.where else f"{lane} ran"
        if self.kind == "outside":
            return f"{lane} arrived (sent t={_t(self.start)})"
        if self.kind == "send":
            return f"{lane} sent (to arrive at t={_t(self.deadline)})"
        if self.kind == "wake":
            return f"loop woke for the deadline t={_t(self.deadline)}"
        if self.kind == "timer":
            if self.lane.kind == "task":
                return f"{self.what} of {lane} (due t={_t(self.deadline)})"
            return f"{lane} ran (due t={_t(self.deadline)})"
        return f"{lane} ran"

    def decision_text(self) -> str:
        """What the Timing changed here ("woke 8 ms late"), or ""."""
        if self.decision is None:
            return ""
        kind, secs = self.decision
        amount = _ms(secs)
        if kind == "wake":
            return f"woke {amount} late"
        if kind == "external":
            return f"arrived {amount} late"
        return f"took {amount}"

    def __repr__(self) -> str:
        d = f" [{self.decision_text()}]" if self.decision else ""
        return f"<Event {self.seq} t={_t(self.start)}..{_t(self.end)} {self.describe()}{d}>"


def _t(x: float | None) -> str:
    return "?" if x is None else f"{x:.6f}".rstrip("0").rstrip(".") if x != int(x) else f"{x:.3f}"


def _ms(secs: float) -> str:
    ms = round(secs * 1000, 6)
    return f"{ms:g} ms"


def _internal_code(fn: str) -> bool:
    return fn.startswith(_ASYNCIO) or fn.startswith(_PYWHEEL)


class Trace:
    """A record of one virtual-time run (see the module's docstring).

    Give it to one loop: ``VirtualEventLoop(trace=tr)``, ``run(main(),
    trace=tr)`` (``trace=True`` on a loop makes one: ``loop.trace``).  It
    fills while the loop runs and stays readable after the loop is closed:
    ``events`` (in the order they happened), ``lanes`` (in the order they
    first appeared), ``write_perfetto(path)``; ``draw_race(punctual,
    failing, path)`` and ``race_timeline(punctual, failing)`` compare two."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.events: list[Event] = []
        self.lanes: list[Lane] = []
        self._by_key: dict[Any, Lane] = {}
        self._labels: dict[str, int] = {}
        self._task_lanes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._loop: weakref.ref | None = None
        self._pending: tuple | None = None  # an outside event being sent

    def __repr__(self) -> str:
        return f"<Trace {self.label!r}: {len(self.events)} events in {len(self.lanes)} lanes>"

    # ---- what people read -------------------------------------------------

    @property
    def decisions(self) -> list[Event]:
        """The events a Timing perturbed, in run order."""
        return [e for e in self.events if e.decision is not None]

    def story(self) -> list[Event]:
        """The events of the program's own lanes, in run order (no
        internals, no wake-ups, no sends: a send is part of the step that
        sent it, its arrival is the event)."""
        return [e for e in self.events if not e.lane.internal and e.kind != "send"]

    def to_perfetto(self, punctual: Trace | None = None) -> dict:
        """The Chrome trace-event JSON object (see ``write_perfetto``)."""
        return _perfetto(self, punctual)

    def write_perfetto(self, path, punctual: Trace | None = None) -> str:
        """Writes the trace as Chrome trace-event JSON (open it in
        ui.perfetto.dev or chrome://tracing): one process for this run, one
        more for ``punctual`` if given; one thread per lane; virtual time on
        the axis (1 virtual second = 1 s shown).  Returns the path."""
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_perfetto(punctual), f, indent=None, separators=(",", ":"))
            f.write("\n")
        return path

    # ---- what the loop calls ------------------------------------------------

    def _attach(self, loop) -> None:
        old = self._loop() if self._loop is not None else None
        if old is not None and old is not loop and not old.is_closed():
            raise RuntimeError(
                f"this Trace records {old!r}, which has not been closed: a Trace records "
                f"one loop at a time"
            )
        self._loop = weakref.ref(loop)

    def _hook(self, loop) -> None:
        """Installs the traced handles and timers on ``loop`` (again after a
        Timing came or went: its hooks replace these)."""
        charged = loop._timing is not None and loop._max_cost > 0
        loop._handle_type = _TracedChargedHandle if charged else _TracedHandle
        loop._call_soon = loop._charged_call_soon  # makes loop._handle_type
        loop.call_at = loop._timing_call_at  # wraps each timer's callback
        loop._fast_timers = False

    def _lane(self, key, label: str, kind: str, detail: str = "", match: str = "") -> Lane:
        """The lane ``key`` names (made on first use).  ``match``: what names
        it across runs (default: the label, numbers as N, and its place
        among the lanes of that label: a task's)."""
        lane = self._by_key.get(key)
        if lane is None:
            n = self._labels.get(label, 0) + 1
            self._labels[label] = n
            shown = label if n == 1 else f"{label} #{n}"
            if not match:
                norm = _NUMBER.sub("N", label)
                m = self._labels.get("\0" + norm, 0) + 1
                self._labels["\0" + norm] = m
                match = f"{norm} #{m}"
            lane = Lane(len(self.lanes), shown, kind, detail, match)
            self.lanes.append(lane)
            self._by_key[key] = lane
        return lane

    def _outside_lane(self, site: str, owner) -> Lane:
        task = self._task_lane(owner) if isinstance(owner, _tasks.Task) else None
        if task is None or task.kind != "task":
            return self._lane(("outside", site), site, "outside", "", _NUMBER.sub("N", site))
        label = f"{site} [{task.label}]"
        match = f"{_NUMBER.sub('N', site)} [{task.key}]"
        return self._lane(("outside", site, task.index), label, "outside", "", match)

    def _internal_lane(self) -> Lane:
        return self._lane("internal", "asyncio/pywheel internals", "internal")

    def _task_lane(self, task) -> Lane:
        lane = self._task_lanes.get(task)
        if lane is not None:
            return lane
        coro = task.get_coro()
        code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        func = f"{code.co_name}()" if code is not None else type(coro).__qualname__
        internal = code is not None and _internal_code(code.co_filename)
        name = task.get_name()
        label = f"task {func}" if _DEFAULT_TASK_NAME.fullmatch(name) else f"task {name!r}"
        detail = ""
        if code is not None:
            detail = f"{func} at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"
        if internal:
            lane = self._internal_lane()
        else:
            # A key per task object: two tasks never share a lane (a second
            # task of one label gets "#2").
            lane = self._lane(object(), label, "task", detail)
        self._task_lanes[task] = lane
        return lane

    def _add(self, kind, lane, start, end, what, where="", deadline=None, decision=None) -> Event:
        e = Event(len(self.events), kind, lane, start, end, what, where, deadline, decision)
        self.events.append(e)
        return e

    def _ran(self, callback, start: float) -> Event:
        """A ready callback begins (a task step, or another callback); its
        event is numbered now, so what it does (a send) comes after it."""
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, _tasks.Task):
            return self._add("step", self._task_lane(owner), start, start, "step")
        if internal_callback(callback):
            lane = self._internal_lane()
        else:
            site = callback_site(callback)
            lane = self._lane(("callback", site), site, "callback", "", _NUMBER.sub("N", site))
        return self._add("callback", lane, start, start, callback_site(callback))

    @staticmethod
    def _done(e: Event, callback, end: float, cost: float, kind: str = "step") -> None:
        """It ended at ``end``, having taken ``cost`` of a Timing's."""
        e.end = end
        if cost:
            e.decision = (kind, cost)
        if e.kind == "step":
            e.where = _after(callback.__self__)

    def _timer(self, loop, callback, owner, when, charged: bool):
        """The callable the loop schedules for ``callback`` (``_timing_call_at``)."""
        if loop._debug:
            loop._check_callback(callback, "call_at")  # before it is hidden
        run = _TracedTimer(loop, callback, owner)
        run._trace = self
        run._when = when
        run._charged = charged
        pending, self._pending = self._pending, None
        if pending is not None:
            # The outside event is sent now: its decision (how late it
            # arrives) is made now, so it is noted on the send, in run
            # order; the arrival is its own event, when the timer runs.
            site, sent, jitter = pending
            # A lane per source: the call site, and the task it was sent
            # from (three handlers at one line are three lanes).
            lane = self._outside_lane(site, owner)
            decision = ("external", jitter) if jitter else None
            self._add("send", lane, sent, max(when, sent), "sent", "", when, decision)
        run._outside = pending
        if pending is None and not internal_callback(callback) and isinstance(owner, _tasks.Task):
            run._armed = task_site(owner)
        else:
            run._armed = ""
        return run

    def _fired(self, timer: _TracedTimer, start: float) -> Event:
        callback = timer._callback
        when = timer._when
        outside = timer._outside
        if outside is not None:
            site, sent, _jitter = outside
            lane = self._outside_lane(site, timer._owner)
            return self._add("outside", lane, sent, start, "arrived", "", when)
        owner = timer._owner
        if internal_callback(callback):
            lane = (
                self._task_lane(owner) if isinstance(owner, _tasks.Task) else self._internal_lane()
            )
            return self._add("timer", lane, start, start, _internal_timer_name(callback), "", when)
        site = callback_site(callback)
        # A lane per callback and the task that armed it ("per timer owner").
        owner_lane = self._task_lane(owner) if isinstance(owner, _tasks.Task) else None
        # (matched across runs by the owner's lane, not by the order timer
        # lanes first appear: that order is what a race changes)
        norm = _NUMBER.sub("N", site)
        if owner_lane is not None and owner_lane.kind == "task":
            label = f"timer {site} of {owner_lane.label}"
            match = f"timer {norm} of {owner_lane.key}"
        else:
            label, match = f"timer {site}", f"timer {norm}"
        lane = self._lane(
            ("timer", site, owner_lane and owner_lane.index), label, "timer", "", match
        )
        return self._add("timer", lane, start, start, site, timer._armed, when)

    def _woke(self, due: float, woke: float) -> None:
        late = round(woke - due, 9)
        decision = ("wake", late) if late > 0 else None
        lane = self._lane("loop", "loop wake-ups", "loop")
        self._add("wake", lane, due, woke, "woke", "", due, decision)

    def _sending(self, site: str, jitter: float) -> None:
        """call_external / latency: the next timer the loop schedules is
        this outside event (sent now)."""
        loop = self._loop() if self._loop is not None else None
        now = loop._vtime if loop is not None else 0.0
        self._pending = (site, now, jitter)

    def _sent(self) -> None:
        """The outside event was scheduled (or refused): no longer pending."""
        self._pending = None


def _after(task) -> str:
    """Where a task waits after a step, or how it ended."""
    if task.done():
        if task.cancelled():
            return "ended: cancelled"
        exc = task._exception  # not exception(): that would mark it retrieved
        if exc is not None:
            return f"ended: raised {type(exc).__name__}"
        return "ended: returned"
    site = task_site(task)
    _, sep, rest = site.partition(" in ")
    name = task.get_name()
    if not _DEFAULT_TASK_NAME.fullmatch(name):
        prefix = f"task {name!r} in "
        if site.startswith(prefix):
            return site[len(prefix) :]
    return rest if sep else site


def _internal_timer_name(callback) -> str:
    name = callback_site(callback)
    if "_set_result_unless_cancelled" in name:
        return "sleep's timer"
    if "timeout" in name.lower():
        return "timeout"
    return f"timer {name}"


class _TracedHandle(_events.Handle):
    """A ready callback whose run is recorded (no Timing charges it)."""

    __slots__ = ()
    _loop: Any
    _callback: Any

    def _run(self) -> None:
        loop = self._loop
        trace = loop._trace
        if trace is None:
            return super()._run()
        e = trace._ran(self._callback, loop._vtime)
        try:
            super()._run()
        finally:
            trace._done(e, self._callback, loop._vtime, 0.0)


class _TracedChargedHandle(_ChargedHandle):
    """A ready callback a Timing charges (``_ChargedHandle``), recorded: the
    same decision, asked the same way, then the run and its cost."""

    __slots__ = ()

    def _run(self) -> None:
        loop = self._loop
        trace = loop._trace
        timing = loop._timing
        if trace is None or timing is None:
            return super()._run()
        start = loop._vtime
        cost = timing._decide("step", loop._max_cost, self._site, start)
        e = trace._ran(self._callback, start)
        try:
            _events.Handle._run(self)
        finally:
            if cost:
                loop._charge(cost)
            trace._done(e, self._callback, loop._vtime, cost)


class _TracedTimer(_ChargedTimer):
    """A timer's callback, recorded; charged as ``_ChargedTimer`` where the
    loop would have charged it (``_charged``).  A ``_ChargedTimer`` for
    everything that looks inside the wheel (its ``_callback`` is the
    program's; repr, == and hash are the callback's)."""

    __slots__ = ("_trace", "_when", "_charged", "_outside", "_armed")

    def __call__(self, *args):
        loop = self._loop
        trace = self._trace
        timing = loop._timing
        start = loop._vtime
        cost = 0.0
        if self._charged and timing is not None:
            cost = timing._decide("timer", loop._max_cost, self._site, start)
        # (not into a trace lent for a run that has ended)
        e = trace._fired(self, start) if loop._trace is trace else None
        try:
            return self._callback(*args)
        finally:
            if cost:
                loop._charge(cost)
            if e is not None:
                trace._done(e, self._callback, loop._vtime, cost, "timer")


def attach(loop, trace) -> Trace:
    """``VirtualEventLoop(trace=...)``: ``trace`` (a Trace, or True for a new
    one) records ``loop`` from now on."""
    if trace is True:
        trace = Trace()
    if not isinstance(trace, Trace):
        raise TypeError(
            f"trace must be a pywheel.testing.Trace (or True for a new one), "
            f"not {type(trace).__name__}"
        )
    trace._attach(loop)
    loop._trace = trace
    trace._hook(loop)
    return trace


def detach(loop) -> None:
    """The loop records no more (a trace lent for one run of a test): its
    handles and timers go back to what its Timing, if any, installs."""
    if loop._trace is None:
        return
    loop._trace = None
    if loop.is_closed():
        return
    timing = loop._timing
    cost = timing is not None and loop._max_cost > 0
    late = timing is not None and loop._max_late > 0
    loop._handle_type = _ChargedHandle if cost else _events.Handle
    if cost:
        loop._call_soon = loop._charged_call_soon
    else:
        loop.__dict__.pop("_call_soon", None)
    if cost or late:
        loop.call_at = loop._timing_call_at
    else:
        loop.__dict__.pop("call_at", None)
        loop._bind_timers()
    loop._fast_timers = not (cost or late)


def outside_event(loop, site, jitter: float) -> None:
    """Called by ``call_external`` / ``latency`` on a traced loop before
    they schedule the event's timer."""
    trace = loop._trace
    if trace is not None:
        trace._sending(site() if callable(site) else site, jitter)


# ---- where two runs part ----------------------------------------------------


class Divergence:
    """Where a failing run first parts from the punctual one.

    Both runs' events of the program's own lanes (tasks, callbacks, timers,
    the outside world; not the loop's wake-ups nor asyncio's internals) are
    taken in the order they happened.  The two sequences are walked side by
    side; the first place where they differ -- another lane ran, or the same
    lane did something else (a task went elsewhere after its step, ended
    otherwise) -- is the divergence (``order`` True).  Times do not count
    there: a decision that only shifts what follows, in the same order, is
    no divergence.  If the two sequences are the same, the divergence is
    the first event whose virtual time differs (``order`` False).  None if
    neither differs."""

    __slots__ = ("index", "failing", "punctual", "order")

    def __init__(self, index: int, failing, punctual, order: bool) -> None:
        self.index = index  # position in both story sequences
        self.failing = failing  # Event, or None (the failing run had ended)
        self.punctual = punctual  # Event, or None
        self.order = order

    @property
    def time(self) -> float:
        """Virtual time of the divergence in the failing run (its last event
        if it had ended)."""
        if self.failing is not None:
            return self.failing.start
        return self.punctual.start if self.punctual is not None else 0.0

    def __repr__(self) -> str:
        f = self.failing.describe() if self.failing is not None else "(ended)"
        p = self.punctual.describe() if self.punctual is not None else "(ended)"
        return f"<Divergence #{self.index} t={_t(self.time)} failing: {f}; punctual: {p}>"


def divergence(punctual: Trace, failing: Trace) -> Divergence | None:
    """Where ``failing`` first parts from ``punctual`` (see ``Divergence``)."""
    a, b = punctual.story(), failing.story()
    for i in range(max(len(a), len(b))):
        p = a[i] if i < len(a) else None
        f = b[i] if i < len(b) else None
        if p is None or f is None or p.key() != f.key():
            return Divergence(i, f, p, True)
    for i, (p, f) in enumerate(zip(a, b, strict=False)):
        if abs(p.start - f.start) > 1e-9 or abs(p.end - f.end) > 1e-9:
            return Divergence(i, f, p, False)
    return None


def race_timeline(punctual: Trace, failing: Trace, *, lines: int = 15) -> str:
    """A few lines for a terminal: where the runs part, the Timing's
    decisions before that point (the ones that can have caused it: the last
    few), and the events around it in the failing run with what the
    punctual run did at the same place."""
    d = divergence(punctual, failing)
    out: list[str] = []
    if d is None:
        out.append("the failing run did what the punctual run did, in the same order and times")
        return "\n".join(out)
    how = "in order" if d.order else "in time only (same order)"
    out.append(
        f"the runs part at t={_t(d.time)} ({how}; compared event by event, "
        f"the program's lanes only):"
    )
    story_f = failing.story()
    cut = (
        d.failing.seq
        if d.failing is not None
        else (failing.events[-1].seq + 1 if failing.events else 0)
    )
    before = [e for e in failing.decisions if e.seq <= cut]
    shown = before[-4:]
    if before:
        more = f" (the last {len(shown)} of {len(before)})" if len(before) > len(shown) else ""
        out.append(f"decisions before it{more}:")
        for e in shown:
            out.append(f"  t={_t(e.at)}  {_decision_line(e)}")
    else:
        out.append("no decision of the Timing came before it")
    budget = max(3, lines - len(out) - 1)
    lo = max(0, d.index - (budget - 1) // 2 - 1)
    hi = min(len(story_f), lo + budget)
    # Each failing event beside the punctual run's event of the same lane
    # and number in that lane.
    same_place = _numbered(punctual.story())
    seen: dict[str, int] = {}
    numbers = []
    for e in story_f:
        n = seen.get(e.lane.key, 0)
        seen[e.lane.key] = n + 1
        numbers.append(n)
    out.append("failing run (and the punctual run's same event of the same lane):")
    for i in range(lo, hi):
        e = story_f[i]
        mark = ">>" if i == d.index else "  "
        p = same_place.get((e.lane.key, numbers[i]))
        if i == d.index:
            p = d.punctual  # what the punctual run did here instead
            other = "punctual: ended" if p is None else f"punctual: t={_t(p.at)} {p.describe()}"
        elif p is None:
            other = "punctual: never"
        elif p.key() != e.key():
            other = f"punctual: t={_t(p.at)} {p.describe()}"
        elif abs(p.at - e.at) <= 1e-9:
            other = "punctual: same"
        else:
            other = f"punctual: t={_t(p.at)}"
        out.append(f"{mark}t={_t(e.at)}  {e.describe()}  ({other})")
    if d.failing is None and d.punctual is not None:
        out.append(
            f">>failing run ended; punctual: t={_t(d.punctual.start)} {d.punctual.describe()}"
        )
    return "\n".join(out[: lines + 1])


def _numbered(story: list[Event]) -> dict[tuple[str, int], Event]:
    """Each event by its lane and its number in that lane."""
    seen: dict[str, int] = {}
    out = {}
    for e in story:
        n = seen.get(e.lane.key, 0)
        seen[e.lane.key] = n + 1
        out[(e.lane.key, n)] = e
    return out


def _decision_line(e: Event) -> str:
    text = e.decision_text()
    if e.kind == "wake":
        return f"the loop {text} for the deadline t={_t(e.deadline)}"
    if e.kind == "outside":
        return f"{e.lane.label} {text}"
    return f"{e.lane.label} {text}"


# ---- Chrome trace-event JSON -----------------------------------------------


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def _perfetto(failing: Trace, punctual: Trace | None) -> dict:
    events: list[dict] = []
    runs = [(1, failing, failing.label or "run")]
    if punctual is not None:
        runs.append((2, punctual, punctual.label or "punctual run"))
    d = divergence(punctual, failing) if punctual is not None else None
    for pid, trace, name in runs:
        events.append(
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
        )
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
        for lane in trace.lanes:
            tid = lane.index + 1
            label = lane.label + (f" ({lane.detail})" if lane.detail else "")
            events.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}
            )
            order = LANE_KINDS.index(lane.kind) * 10000 + lane.index
            events.append(
                {
                    "name": "thread_sort_index",
                    "ph": "M",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": order},
                }
            )
        for e in trace.events:
            tid = e.lane.index + 1
            args: dict[str, Any] = {"event": e.describe()}
            if e.where:
                args["where" if e.kind == "step" else "armed by"] = e.where
            if e.deadline is not None:
                args["deadline"] = e.deadline
            args["virtual time"] = f"t={_t(e.start)}..{_t(e.end)}"
            if e.decision is not None:
                args["decision"] = f"{e.decision[0]}: {e.decision_text()}"
            if e.kind == "send":
                events.append(
                    {
                        "name": "sent",
                        "cat": "send",
                        "ph": "i",
                        "s": "t",
                        "ts": _us(e.start),
                        "pid": pid,
                        "tid": tid,
                        "args": args,
                    }
                )
            elif e.kind == "wake":
                # The loop's sleep: an instant when it woke (the decision, if late).
                events.append(
                    {
                        "name": f"woke {e.decision_text()}" if e.decision else "woke",
                        "cat": "wake",
                        "ph": "i",
                        "s": "t",
                        "ts": _us(e.end),
                        "pid": pid,
                        "tid": tid,
                        "args": args,
                    }
                )
                continue
            if e.kind != "send":
                name = e.what if e.kind in ("callback", "timer") else e.describe()
                if e.kind == "step":
                    name = f"step -> {e.where}"
                events.append(
                    {
                        "name": name,
                        "cat": e.kind,
                        "ph": "X",
                        "ts": _us(e.start),
                        "dur": max(0.0, round(_us(e.end) - _us(e.start), 3)),
                        "pid": pid,
                        "tid": tid,
                        "args": args,
                    }
                )
            if e.decision is not None:
                events.append(
                    {
                        "name": f"decision: {e.decision_text()}",
                        "cat": "decision",
                        "ph": "i",
                        "s": "t",
                        "ts": _us(e.start),
                        "pid": pid,
                        "tid": tid,
                        "args": {
                            "decision": f"{e.decision[0]}: {e.decision_text()}",
                            "event": e.describe(),
                        },
                    }
                )
        if d is not None:
            mine = d.failing if trace is failing else d.punctual
            if mine is not None:
                events.append(
                    {
                        "name": "first divergence",
                        "cat": "divergence",
                        "ph": "i",
                        "s": "p",
                        "ts": _us(mine.start),
                        "pid": pid,
                        "tid": mine.lane.index + 1,
                        "args": {"event": mine.describe(), "order": d.order},
                    }
                )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "pywheel.testing",
            "clock": "virtual time (1 virtual second = 1 s on the axis)",
        },
    }
