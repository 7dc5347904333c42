"""Timing: the perturbations of one run (late wake-ups, slow callbacks, a slow
outside world), drawn lazily while the run goes, recorded, and replayed.

Nothing here imports hypothesis: ``timings()`` does, when it is called."""

from __future__ import annotations

import itertools
import math
import re
import time
import weakref
from asyncio import AbstractEventLoop
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # hypothesis is imported only when timings() is called
    from hypothesis.strategies import SearchStrategy

__all__ = ["Timing", "timings"]

#: The three kinds of decision, in the order ``repr()`` names them.
KINDS = ("wake", "step", "timer", "external")

_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-fA-F]+")


def _check_max(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return value


def _fmt(x: float) -> str:
    return repr(round(x, 9))


def _amount(secs: float) -> str:
    """A perturbation for people: "20 ms", "0.5 ms", "1.5 s"."""
    if secs >= 1:
        return f"{_fmt(secs)} s"
    text = repr(round(secs * 1000, 6))
    return (text[:-2] if text.endswith(".0") else text) + " ms"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_KIND_WORD = {"wake": "wake-up for", "step": "step", "timer": "timer", "external": "event"}


def _describe_notes(notes) -> list[str]:
    """One phrase per run of equal decisions at one site."""
    parts = []
    i = 0
    while i < len(notes):
        kind, t, secs, site = notes[i]
        # Consecutive equal decisions at one site read as one line.
        j = i + 1
        while j < len(notes) and notes[j][0] == kind and notes[j][2:] == (secs, site):
            j += 1
        n = j - i
        at = f"t={_fmt(t)}" if n == 1 else f"t={_fmt(t)}..{_fmt(notes[j - 1][1])}"
        each = "" if n == 1 else " each"
        amount = _amount(secs)
        if kind == "wake":
            what = "the deadline" if n == 1 else f"each of {n} deadlines"
            parts.append(f"woke {amount} late for {what} {at} ({site})")
        elif kind == "step":
            what = "step" if n == 1 else f"{n} steps"
            parts.append(f"{what} of {site} at {at} took {amount}{each}")
        elif kind == "timer":
            what = "a timer" if n == 1 else f"{n} timers"
            parts.append(f"{what} of {site} at {at} took {amount}{each}")
        else:
            what = "" if n == 1 else f" ({n} events)"
            parts.append(f"{site}{what} sent at {at} arrived {amount} late{each}")
        i = j
    return parts


class Timing:
    """How one run is perturbed: the loop waking late, callbacks taking time,
    the outside world answering late.  Pass it as ``timing=`` to
    ``VirtualEventLoop``, ``new_event_loop`` or ``run``.

    Every decision is a whole number of the loop's ticks in ``[0, max]`` (a
    bound below one tick: 0 or the bound), asked
    of ``draw(n)`` (which returns an int in ``0..n``) the first time the Timing
    is used, and recorded; the next loops given the same Timing replay the
    record (decisions past its end are 0).  ``draw=None`` is the punctual run.
    ``timings()`` makes Timings whose draws come from hypothesis, so failures
    shrink toward the punctual run.

    ``repr()`` lists the decisions of the recorded run that were not 0: which
    wake-up, step or external event (named by task and line, or callback),
    at what virtual time, by how much."""

    __slots__ = (
        "max_late",
        "max_cost",
        "max_jitter",
        "_draw",
        "_hypothesis",
        "_record",
        "_pos",
        "_nz",
        "_notes",
        "_internal",
        "_source",
        "_state",
        "_owner",
        "_dead",
        "_draws",
        "max_draws",
        "_script",
        "_tick",
        "_end_run",
        "__weakref__",
    )

    def __init__(
        self,
        *,
        max_late: float = 0.0,
        max_cost: float = 0.0,
        max_jitter: float = 0.0,
        draw: Callable[[int], int] | None = None,
        max_draws: int | None = None,
    ) -> None:
        if max_draws is not None and (
            isinstance(max_draws, bool) or not isinstance(max_draws, int) or max_draws < 0
        ):
            raise ValueError(f"max_draws must be an int >= 0 or None, got {max_draws!r}")
        self.max_draws = max_draws
        self._draws = 0
        self.max_late = _check_max("max_late", max_late)
        self.max_cost = _check_max("max_cost", max_cost)
        self.max_jitter = _check_max("max_jitter", max_jitter)
        if draw is not None and not callable(draw):
            raise TypeError("draw must be a callable taking n and returning an int in 0..n")
        self._draw = draw
        self._hypothesis = False
        # Only the non-zero decisions are kept, as (index among the
        # decisions of their kind, seconds): a long, mostly punctual run
        # records in proportion to what it perturbed, not to its length.
        self._record: dict[str, list[tuple[int, float]]] = {k: [] for k in KINDS}
        self._pos = dict.fromkeys(KINDS, 0)  # decisions of each kind so far
        self._nz = dict.fromkeys(KINDS, 0)  # replay: next entry of _record[kind]
        self._notes: list[tuple[str, float, float, str]] = []
        # Per note: True if its site is asyncio's or pywheel's own (no frame
        # or callback of the program's): repr() folds those into a count.
        self._internal: list[bool] = []
        # timings(): the strategy's state this Timing was drawn under (a
        # minimized script to play instead of drawing; see _shrink).
        self._source: dict | None = None
        self._state = "new"  # -> "recording" -> "recorded" (then replays)
        self._owner: weakref.ref | None = None
        # What the loop it drives gives it (_attach): its tick, the unit of a
        # decision, and how to end its run (a weak method: the loop holds
        # this Timing, and a strong one back would make a cycle).
        self._tick = 0.001
        self._end_run: weakref.WeakMethod | None = None
        self._dead = False
        # minimize(): the decisions to make, by (kind, index), instead of drawing.
        self._script: dict[tuple[str, int], float] | None = None

    # ---- what the user sees -------------------------------------------------

    @property
    def decisions(self) -> list[tuple[str, float, float, str]]:
        """The recorded run's non-zero decisions: (kind, virtual time, seconds, site)."""
        return list(self._notes)

    @property
    def punctual(self) -> bool:
        """True if the recorded run made no non-zero decision."""
        return not self._notes

    @property
    def token(self) -> str:
        """This Timing's decisions as a replay token: its bounds and its
        recorded non-zero decisions (``Timing.from_token(timing.token)``
        makes them again; ``pytest --timing-replay=TOKEN`` plays them on the
        first loop of a test's run).  ``RuntimeError`` until its run is
        recorded (its loop closed)."""
        if self._state == "new" and self._script is not None:
            return encode_token(self._bounds(), [self._script])
        if self._state in ("new", "recording"):
            raise RuntimeError(
                "a Timing has a token once its run is recorded (after its loop closed)"
            )
        return encode_token(self._bounds(), [self._in_order()])

    @classmethod
    def from_token(cls, token: str, loop: int = 0) -> Timing:
        """The Timing of loop number ``loop`` (0: the first loop the test
        made or ran) of the run a replay token names: the token of a
        ``--timing-fuzz`` report (``--timing-replay=TOKEN``) or a Timing's
        ``token``.  Pass it as ``timing=`` to rerun that loop's decisions,
        or call its ``minimize()`` (which runs it first).  A seed token
        (bounds and a seed) draws as the fuzz run did: it meets the same
        decisions if the program makes the same loops in the same order.
        ``ValueError`` saying what is wrong for a string that is not a
        token."""
        if isinstance(loop, bool) or not isinstance(loop, int) or loop < 0:
            raise ValueError(
                f"loop must be an int >= 0 (the loop's number in the run), not {loop!r}"
            )
        kind, bounds, what = parse_token(token)
        if kind == "seed":
            from ._session import Schedule

            return Schedule(*bounds, what).timing(loop)
        late, cost, jitter = bounds
        t = cls(max_late=late, max_cost=cost, max_jitter=jitter)
        t._script = dict(what[loop]) if loop < len(what) else {}
        return t

    def _bounds(self) -> tuple[float, float, float]:
        return (self.max_late, self.max_cost, self.max_jitter)

    def __repr__(self) -> str:
        """The recorded run's decisions that touch the program, in its own
        words: which wake-up, step, timer callback or outside event (task
        and line, or callback), at what virtual time, what changed ("woke
        20 ms late", "took 2 ms", "arrived 7 ms late").  Decisions at
        asyncio's or pywheel's own events (a step of
        ``_run_until_complete_cb()``, of a task in
        ``shutdown_default_executor()``) are folded into one line with a
        count; ``decisions`` keeps them all."""
        bounds = [
            f"{name}={_fmt(v)}"
            for name, v in (
                ("max_late", self.max_late),
                ("max_cost", self.max_cost),
                ("max_jitter", self.max_jitter),
            )
            if v
        ]
        head = "Timing(" + ", ".join(bounds)
        if self._state == "new":
            return head + ")"
        if not self._notes and not self._dead:
            return head + ": punctual)"
        shown = [n for n, inner in zip(self._notes, self._internal, strict=True) if not inner]
        folded = [n for n, inner in zip(self._notes, self._internal, strict=True) if inner]
        parts = _describe_notes(shown)
        if folded:
            names = list(dict.fromkeys(f"{_KIND_WORD[k]} of {site}" for k, _, _, site in folded))
            more = "" if len(names) <= 2 else f", +{len(names) - 2} more"
            parts.append(
                f"{_count(len(folded), 'decision')} at asyncio's or pywheel's own events "
                f"({', '.join(names[:2])}{more}; .decisions lists every one)"
            )
        if self._dead:
            parts.append("recording ended early: its draw raised")
        sep = "; " if len(parts) < 3 else ";\n  "
        return head + (": " if len(parts) < 3 else ":\n  ") + sep.join(parts) + ")"

    def minimize(
        self,
        fails: Callable[[Timing], bool],
        *,
        rounds: int = 3,
        seconds: float | None = None,
    ) -> Timing:
        """A Timing that keeps only the recorded decisions a failure needs.

        ``fails(timing)`` runs the program under ``timing`` and returns True
        if it failed.  Starting from this Timing's recorded run, each pass
        keeps every change after which ``fails`` still returns True:

        - *groups* (delta debugging): the non-zero decisions are zeroed in
          contiguous groups, latest first -- the later half, the earlier
          half, then quarters, down to one at a time -- so decisions that
          can only go together (one alone moves the program's phases apart,
          all of them put it back) go as a group.  A decision is named by
          its place among those of its kind ("the 57th wake-up"), and
          removing a perturbation can remove or add events before the later
          ones (two timers no longer run in one batch: one more wake-up); a
          removal that alone no longer fails is tried again with the later
          decisions one or two places on or back;
        - *merges*: two consecutive decisions of a kind become one, at
          either place, of their summed size (up to the bound), for a
          failure that needs lateness to pile up;
        - *values*: each decision left is halved;
        - *subsets*: when a pass changed nothing, each decision alone, then
          each pair (and triple, of a dozen or fewer), at its own value and
          at its kind's bound (a smaller failure of fewer, larger
          perturbations).

        Passes repeat (at most ``rounds``) until one changes nothing, or
        until ``seconds`` of real time have passed (no limit if None; the
        pass under way stops there).  Each change kept costs one run, each
        tried one: a pass tries about ten runs per decision left, at most.
        Returns the last Timing that failed (which replays, like any used
        Timing), or one replaying this Timing's decisions if none did.  A
        Timing not run yet (``Timing.from_token()``) is run first, by
        ``fails``, to record it (returned as is if that run passes)."""
        if self._state == "recording":
            raise RuntimeError("minimize() needs a Timing whose run was recorded")
        deadline = None if seconds is None else time.monotonic() + seconds
        if self._state == "new":
            # Not run yet (Timing.from_token()): its first run records it.
            if not fails(self) or self._state == "new":
                return self
        keep = self._in_order()
        best = self._scripted(keep)
        if not fails(best):
            return self._scripted(keep)  # does not replay here: leave it whole

        def out_of_time() -> bool:
            return deadline is not None and time.monotonic() >= deadline

        def attempt(trial: dict) -> bool:
            nonlocal keep, best
            t = self._scripted(trial)
            if fails(t):
                # What that run did decide, in the order it did (a value that
                # rounds to no tick is no decision).
                keep, best = t._in_order(), t
                return True
            return False

        def without(group: set, shift: int = 0) -> dict:
            # keep minus group; with shift, the decisions after the group
            # move that many decisions of their kind later (or earlier).
            trial, after = {}, False
            for (kind, index), v in keep.items():
                if (kind, index) in group:
                    after = True
                    continue
                if after and shift:
                    index += shift
                    if index < 0:
                        return {}
                trial[(kind, index)] = v
            return trial if len(trial) == len(keep) - len(group) else {}

        for _ in range(rounds):
            changed = False
            # Groups: n contiguous groups of the decisions left, n = 2, 4,
            # ... up to one per decision (ddmin's subsets; a group that goes
            # takes its decisions with it, and the granularity is kept).
            # Decisions are named by their place among those of their kind
            # ("the 57th wake-up"), and a perturbation removed can remove or
            # add events before the ones after it (two timers no longer in
            # one batch: one more wake-up): where the removal alone no
            # longer fails, it is tried again with the later decisions one
            # or two places on or back.
            n = 2
            while keep and not out_of_time():
                keys = list(keep)
                size = -(-len(keys) // n)
                for start in reversed(range(0, len(keys), size)):
                    group = set(keys[start : start + size])
                    if len(group) >= len(keep) or not group <= keep.keys():
                        continue  # zeroing everything: the punctual run passes
                    for shift in (0, 1, -1, 2, -2):
                        if out_of_time():
                            break
                        trial = without(group, shift)
                        if trial and attempt(trial):
                            changed = True
                            break
                    if out_of_time():
                        break
                if size == 1:
                    break
                n = min(n * 2, len(keep))
            # Merges: two consecutive decisions of a kind made one, at
            # either place, of their summed size (up to the bound): a failure
            # that needs lateness to pile up (a deadline that expires while
            # its task waits behind others) keeps it in fewer decisions.
            bound = {"wake": self.max_late, "step": self.max_cost, "timer": self.max_cost}
            i = len(keep) - 1
            while i > 0 and not out_of_time():
                keys = list(keep)
                if i >= len(keys):
                    i = len(keys) - 1
                    continue
                a, b = keys[i - 1], keys[i]
                if a[0] == b[0]:
                    total = min(keep[a] + keep[b], bound.get(a[0], self.max_jitter))
                    for at, gone in ((b, a), (a, b)):
                        trial = {k: (total if k == at else v) for k, v in keep.items() if k != gone}
                        if attempt(trial):
                            changed = True
                            break
                i -= 1
            # Values: halve each decision left while the failure reproduces
            # (a value that rounds to no tick is a removal, tried above).
            for key in reversed(list(keep)):
                if out_of_time():
                    break
                if key not in keep:
                    continue
                trial = dict(keep)
                trial[key] = keep[key] / 2
                if attempt(trial):
                    changed = True
            # Subsets: each decision alone, then each pair (and triple, for
            # a dozen decisions or fewer), at its own value and at its kind's
            # bound.  The passes above stop at a Timing
            # none of whose decisions can go alone; a smaller failure made of
            # other, larger perturbations (one wake-up at the bound doing
            # what three small ones did) is not next to it.  Tried only then
            # (changed is False), two runs per subset.
            if not changed and len(keep) > 1:
                changed = self._subsets(keep, attempt, out_of_time)
            if not changed or out_of_time():
                break
        return best

    def _subsets(self, keep: dict, attempt, out_of_time) -> bool:
        bound = {
            "wake": self.max_late,
            "step": self.max_cost,
            "timer": self.max_cost,
            "external": self.max_jitter,
        }
        keys = list(keep)
        # One decision alone, also a few places on or back (removing the
        # others moves the events after them), at its bound.
        for kind, index in reversed(keys):
            for shift in (-1, 1, -2, 2, -3, 3):
                if out_of_time():
                    return False
                if index + shift >= 0 and attempt({(kind, index + shift): bound[kind]}):
                    return True
        # Triples too while they are few (n <= 12: at most 220 of them).
        for size in (1, 2, 3) if len(keys) <= 12 else (1, 2):
            if size >= len(keys):
                break
            for combo in itertools.combinations(reversed(keys), size):
                wanted = set(combo)
                for at_bound in (False, True):
                    if out_of_time():
                        return False
                    trial = {
                        k: (bound[k[0]] if at_bound else v) for k, v in keep.items() if k in wanted
                    }
                    if at_bound and all(trial[k] == keep[k] for k in trial):
                        continue
                    if attempt(trial):
                        return True
        return False

    def _in_order(self) -> dict[tuple[str, int], float]:
        """The recorded non-zero decisions, (kind, index) -> seconds, in the
        order they were made: the j-th note of a kind is the j-th entry of
        that kind's record."""
        seen = dict.fromkeys(KINDS, 0)
        out = {}
        for kind, *_ in self._notes:
            index, secs = self._record[kind][seen[kind]]
            seen[kind] += 1
            out[(kind, index)] = secs
        return out

    def _scripted(self, script: dict[tuple[str, int], float]) -> Timing:
        t = Timing(max_late=self.max_late, max_cost=self.max_cost, max_jitter=self.max_jitter)
        t._script = dict(script)
        return t

    # ---- what the loop calls --------------------------------------------------
    #
    # The loop calls in; the Timing never calls the loop's own methods: it
    # knows its owner only as an event loop (which one, whether closed), and
    # gets from _attach and each _decide what deciding needs (the tick, a way
    # to end the run, the virtual time, a name for the event).
    #
    # States: "new" (no loop has run with it) -> "recording" (from the first
    # run_forever of the loop it is attached to) -> "recorded" (that loop
    # closed, or was collected) -> "replaying" (each later loop; replays from
    # the start).  A loop that closes without ever running leaves a new Timing
    # new, so the next loop records instead of replaying an empty record.

    def _check_free(self, loop: AbstractEventLoop) -> None:
        """Refuses (RuntimeError) if another loop that is not closed drives
        this Timing.  Called before the loop builds anything."""
        owner = self._owner() if self._owner is not None else None
        if owner is not None and owner is not loop and not owner.is_closed():
            raise RuntimeError(
                f"this Timing is in use by {owner!r}, which has not been closed: a Timing "
                "drives one loop at a time (close that loop; reusing the Timing then "
                "replays its recorded decisions)"
            )

    def _attach(
        self, loop: AbstractEventLoop, tick: float, abort: Callable[[BaseException], None]
    ) -> None:
        """``loop`` is driven by this Timing from now on: its decisions are
        whole ``tick``s, and ``abort(exc)`` (a bound method of the loop)
        ends its run with ``exc``."""
        self._check_free(loop)
        if self._state == "recording":
            # Its recording loop was collected without close(): the weakref
            # died before that loop's __del__ could detach it.
            self._finish_recording()
        self._owner = weakref.ref(loop)
        self._tick = tick
        self._end_run = weakref.WeakMethod(abort)
        if self._state != "new":
            self._state = "replaying"
            self._pos = dict.fromkeys(KINDS, 0)
            self._nz = dict.fromkeys(KINDS, 0)

    def _started(self, loop: AbstractEventLoop) -> None:
        if self._state == "new":
            self._state = "recording"

    def _detach(self, loop: AbstractEventLoop) -> None:
        owner = self._owner() if self._owner is not None else None
        if owner is not None and owner is not loop:
            return
        self._owner = None
        if self._state == "recording":
            self._finish_recording()

    def _release_collector(self) -> None:
        owner = self._owner() if self._owner is not None else None
        if owner is not None:
            from . import _gc

            _gc.release(owner)

    def _finish_recording(self) -> None:
        self._state = "recorded"
        if self._hypothesis:
            try:
                from hypothesis import note

                note(f"timing: {self!r}")
            except Exception:  # outside a test: nothing to note in
                pass

    def _decide(self, kind: str, limit: float, site, at: float) -> float:
        """Seconds of perturbation for one decision of ``kind`` (0..limit, in
        whole ticks).  ``site()`` names the event; it is called only for
        non-zero decisions of the recording run, which are noted at virtual
        time ``at``."""
        unit = self._tick
        n = int(limit / unit + 1e-9)
        if n <= 0:
            if limit <= 0:
                return 0.0
            # A bound below one tick (max_late=0.0005 on the 1 ms tick) is
            # decided in one step of its own size: on time, or the whole
            # bound.  The clock keeps exact nanoseconds (the tick is only
            # the wheel's bucket size), so nothing needs whole ticks; in
            # whole ticks such a bound perturbed nothing, as all-zero
            # bounds, which timings() refuses.  Bounds of a tick or more
            # are decided in ticks, as always (their replays unchanged).
            unit, n = limit, 1
        if self._state != "recording":
            # Replay: exactly the recorded decisions, then 0, as the
            # recording played after its last draw (also when that recording
            # ended in a draw error: the decisions before it replay).
            i = self._pos[kind]
            self._pos[kind] = i + 1
            rec = self._record[kind]
            j = self._nz[kind]
            if j < len(rec) and rec[j][0] == i:
                self._nz[kind] = j + 1
                return rec[j][1]
            return 0.0
        if self._dead:
            return 0.0
        draw = self._draw
        if self._script is not None:
            # A script (minimize(), a replay token) names seconds; a token
            # written by hand may ask for more than the bound: the bound.
            ticks = round(self._script.get((kind, self._pos[kind]), 0.0) / unit)
            ticks = min(max(ticks, 0), n)
        elif draw is None or (self.max_draws is not None and self._draws >= self.max_draws):
            ticks = 0
        else:
            self._draws += 1
            try:
                ticks = draw(n)
                if isinstance(ticks, bool) or not isinstance(ticks, int) or not 0 <= ticks <= n:
                    raise ValueError(f"draw({n}) returned {ticks!r}, not an int in 0..{n}")
            except BaseException as exc:
                # Hypothesis ends an example by raising from inside a draw.
                # Raised here, inside a callback, the loop would report it
                # and go on (and a task whose step died would wait forever).
                # Instead the decision is 0, the Timing plays punctually from
                # now on, and the loop stops after this iteration and raises
                # exc from run_forever(), so it reaches hypothesis.
                self._dead = True
                abort = self._end_run() if self._end_run is not None else None
                if abort is not None:
                    abort(exc)
                return 0.0
        i = self._pos[kind]
        self._pos[kind] = i + 1
        if not ticks:
            return 0.0
        secs = ticks * unit
        self._record[kind].append((i, secs))
        try:
            where = site()
        except Exception as exc:  # a description must never break the run
            where = f"<{type(exc).__name__}>"
        # The same run must give the same repr: no memory addresses.
        internal = bool(getattr(where, "internal", False))
        where = _ADDRESS.sub("", str(where))
        self._notes.append((kind, at, secs, where))
        self._internal.append(internal)
        return secs


# ---- replay tokens -------------------------------------------------------------
#
# A token names one run of a test, every loop of it, and is pasted on a
# command line: only characters a shell leaves alone.  Two shapes, told
# apart by the fourth field:
#
#   max_late,max_cost,max_jitter,SEED        a --timing-fuzz run: 16 hex
#                                            digits; the loops' Timings are
#                                            drawn from it (_session.Schedule)
#   max_late,max_cost,max_jitter,script/L0/L1...
#                                            the decisions themselves, one
#                                            field per loop in the order the
#                                            loops took their Timings; a field
#                                            is KINDINDEX=MICROSECONDS joined
#                                            by "+" (kinds w: wake-up, s:
#                                            step, t: timer, e: external; a
#                                            value in nanoseconds ends in n)
#
# A minimized run is named by its decisions: no seed draws them.  Rejected:
# a seed plus a list of decisions to zero (a removal moves the places of
# the decisions after it, so the seed's draws no longer land where they
# did), and JSON or base64 (neither survives a shell unquoted, nor reads).

_KIND_CODE = {"wake": "w", "step": "s", "timer": "t", "external": "e"}
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}
_ITEM = re.compile(r"([a-z])(\d+)=(\d+)(n?)")
_SEED = re.compile(r"[0-9a-fA-F]{1,16}")


def encode_token(
    bounds: tuple[float, float, float], scripts: list[dict[tuple[str, int], float]]
) -> str:
    """The token of a run whose loops make ``scripts``' decisions."""
    loops = []
    for script in scripts:
        items = []
        for (kind, index), secs in script.items():
            ns = round(secs * 1e9)
            if ns <= 0:
                continue
            value = str(ns // 1000) if ns % 1000 == 0 else f"{ns}n"
            items.append(f"{_KIND_CODE[kind]}{index}={value}")
        loops.append("+".join(items))
    late, cost, jitter = bounds
    return f"{late!r},{cost!r},{jitter!r},script" + "".join("/" + x for x in loops)


def parse_token(token: Any) -> tuple[str, tuple[float, float, float], Any]:
    """("seed", bounds, seed) or ("script", bounds, [script per loop]);
    ValueError naming what is wrong (never Python's own words)."""
    if not isinstance(token, str):
        raise ValueError(f"a replay token is a string, not {type(token).__name__}")
    fields = token.strip().split(",")
    if len(fields) != 4:
        raise ValueError(
            f"a replay token has 4 fields separated by commas "
            f"(max_late,max_cost,max_jitter,SEED or script/...), this one has {len(fields)}"
        )
    bounds = []
    for name, text in zip(("max_late", "max_cost", "max_jitter"), fields[:3], strict=True):
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"its {name} field {text!r} is not a number of seconds") from None
        try:
            bounds.append(_check_max(name, value))
        except ValueError as exc:
            raise ValueError(f"its {exc}") from None
    last = fields[3]
    if _SEED.fullmatch(last):
        return "seed", tuple(bounds), int(last, 16)
    if last != "script" and not last.startswith("script/"):
        raise ValueError(
            f"its last field {last!r} is neither a seed (16 hex digits) nor "
            f"script/... (the decisions of a minimized run)"
        )
    scripts = []
    for n, loop in enumerate(last.split("/")[1:]):
        script: dict[tuple[str, int], float] = {}
        for item in loop.split("+") if loop else ():
            m = _ITEM.fullmatch(item)
            if m is None or m.group(1) not in _CODE_KIND:
                raise ValueError(
                    f"decision {item!r} of loop {n} is not KIND INDEX=MICROSECONDS "
                    f"(kinds w, s, t, e; e.g. e3=7000)"
                )
            code, index, value, nano = m.groups()
            secs = int(value) / (1e9 if nano else 1e6)
            script[(_CODE_KIND[code], int(index))] = secs
        scripts.append(script)
    if not any(bounds):
        raise ValueError("its bounds are all 0: such a run perturbs nothing")
    return "script", tuple(bounds), scripts


#: Decisions drawn from hypothesis per run; later ones are 0 (punctual).
#: Hypothesis caps the data of one example, and a run past the cap would
#: end every example as "data too large".
MAX_DRAWS = 2000


#: The bounds ``timings()`` uses when it is given none (seconds); see its
#: docstring for how they were chosen.
DEFAULT_MAX_LATE = 0.02
DEFAULT_MAX_COST = 0.002
DEFAULT_MAX_JITTER = 0.01
#: The same three by ``timings()``'s keywords (read-only): what
#: ``timings()`` and ``pytest --timing-fuzz`` use when given no bound, and
#: the real-bug corpus's one set of bounds (``examples/real_bugs``).
DEFAULT_BOUNDS = MappingProxyType(
    {"max_late": DEFAULT_MAX_LATE, "max_cost": DEFAULT_MAX_COST, "max_jitter": DEFAULT_MAX_JITTER}
)


class _Default(float):
    """A bound left out of ``timings()``: reads as its default value, and
    tells ``timings()`` it was not given (``None`` is a bad bound there)."""

    def __repr__(self) -> str:
        return f"<default {float(self)!r}>"


def timings(
    *,
    max_late: float = _Default(DEFAULT_MAX_LATE),
    max_cost: float = _Default(DEFAULT_MAX_COST),
    max_jitter: float = _Default(DEFAULT_MAX_JITTER),
    max_draws: int = MAX_DRAWS,
) -> SearchStrategy[Timing]:
    """A hypothesis strategy of ``Timing`` objects (needs hypothesis).

    - ``max_late``: each time the loop sleeps toward its next timer it wakes
      0..max_late seconds after that deadline (never early); the timers due by
      then run in deadline order, after what was already ready.
    - ``max_cost``: each callback (a task step, a timer's callback) takes
      0..max_cost seconds of virtual time; a timer that falls due meanwhile
      runs in the next iteration, after the callbacks made ready by then.
    - ``max_jitter``: each ``call_external()``/``latency()`` event arrives
      0..max_jitter seconds late, independently.

    With no bound given, all three take their defaults: ``max_late=0.02``,
    ``max_cost=0.002``, ``max_jitter=0.01``: the smallest of the bounds
    tried on the real-bug corpus (``examples/real_bugs``) that found the
    most of its bugs, with no false alarm on their fixed versions -- the
    hiccups of a loaded machine (a wake-up a scheduler slice late, a
    callback preempted for a couple of milliseconds) for programs whose
    timeouts and periods are tens of milliseconds and more; a smaller
    ``max_late`` missed the bug that needs a 50 ms deadline to expire.
    Given any bound, the others are 0 (a test that names one kind of
    perturbation gets only that kind).  At least one bound
    must be non-zero (``ValueError`` otherwise: a Timing with none perturbs
    nothing).

    Each decision is drawn lazily, while the run goes, as a whole number of
    the loop's ticks (uniform up to the bound; a bound below one tick is
    decided as 0 or the whole bound); the simplest choice of each
    is "no perturbation", so failures shrink toward the punctual run.  Only
    the first ``max_draws`` decisions of a run are drawn (hypothesis caps
    the data of one example); the rest are punctual."""
    bounds = (max_late, max_cost, max_jitter)
    if not all(isinstance(b, _Default) for b in bounds):  # given any: the rest are 0
        max_late, max_cost, max_jitter = (0.0 if isinstance(b, _Default) else b for b in bounds)
    max_late = _check_max("max_late", max_late)
    max_cost = _check_max("max_cost", max_cost)
    max_jitter = _check_max("max_jitter", max_jitter)
    if not (max_late or max_cost or max_jitter):
        # Every Timing it made would be punctual: a fuzz test that finds
        # nothing because it tries nothing.
        raise ValueError(
            "timings() needs at least one non-zero bound, in seconds: max_late= (the "
            "loop wakes late), max_cost= (callbacks take time) or max_jitter= (the "
            "outside world answers late); with all three 0 every Timing is punctual "
            "(use Timing() for a punctual run; timings() with no bound at all uses "
            f"the defaults max_late={DEFAULT_MAX_LATE}, max_cost={DEFAULT_MAX_COST}, "
            f"max_jitter={DEFAULT_MAX_JITTER})"
        )
    from hypothesis import strategies as st
    from hypothesis.control import cleanup

    ints: dict[int, Any] = {}
    # A minimized script to play instead of drawing, set by _shrink once a
    # failure was minimized (and reset when the test's run ends).
    state: dict[str, Any] = {"script": None, "note": None}

    @st.composite
    def _timing(draw) -> Timing:
        script = state["script"]
        if script is not None:
            t = Timing(max_late=max_late, max_cost=max_cost, max_jitter=max_jitter)
            t._script = dict(script)
            t._hypothesis = True
            t._source = state
            from hypothesis import note

            note(state["note"])
            cleanup(t._release_collector)
            return t

        def draw_ticks(n: int) -> int:
            # One choice per decision, 0 (its simplest value) meaning "no
            # perturbation here", so shrinking drops perturbations one by
            # one without moving the choices of the decisions after it.
            # Uniform over 0..n: sparser draws (a per-run rate of perturbed
            # decisions, as --timing-fuzz makes) were tried, and found the
            # corpus bugs less often (examples/real_bugs/README.md).
            s = ints.get(n)
            if s is None:
                s = ints[n] = st.integers(0, n)
            return draw(s)

        t = Timing(
            max_late=max_late,
            max_cost=max_cost,
            max_jitter=max_jitter,
            draw=draw_ticks,
            max_draws=max_draws,
        )
        t._hypothesis = True
        t._source = state
        # The loop a test left open gives the cyclic collector back at the
        # end of the example (see _gc): left off, it would stay off for the
        # rest of the session, and every cycle made after it would pile up.
        cleanup(t._release_collector)
        return t

    return _timing()
