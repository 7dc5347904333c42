"""VirtualEventLoop: a WheelEventLoop whose clock jumps to the next timer.

It builds on WheelEventLoop through three seams only, so it keeps whatever
order the loop's own ``_run_once`` gives (stock asyncio's):

- ``time()`` reads a virtual clock;
- the selector is wrapped: when the loop would sleep (nothing ready), the
  wrapper moves the virtual clock to the next timer's deadline instead;
- with a Timing that charges callbacks, ``_call_soon`` makes handles whose run
  advances the clock, and ``call_at`` wraps each timer's callback so that its
  run does too.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import heapq
import itertools
import math
import os
import sys as _sys
import threading as _threading
import types
import weakref
from asyncio import events as _events
from asyncio import tasks as _tasks
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from .._tracebacks import hide as __tracebackhide__  # noqa: F401  (pytest: see there)
from ..asyncio import WheelEventLoop, _lazy_policy, _policy_base
from . import _agens, _clocks, _gc, _peers
from ._sites import callback_site, internal_callback, internal_code, task_site, timer_site
from ._timing import Timing

if TYPE_CHECKING:
    from ._trace import Trace

_T = TypeVar("_T")

__all__ = [  # and EventLoopPolicy, where asyncio still has policies (__getattr__)
    "DeadlockError",
    "outside",
    "TimeLimitError",
    "VirtualEventLoop",
    "VirtualTimeError",
    "new_event_loop",
    "run",
]

#: Real seconds the loop waits for outstanding real work before jumping.
DEFAULT_AUTOJUMP_THRESHOLD = 0.05

#: Virtual seconds each loop iteration that does not jump takes (see
#: VirtualEventLoop's ``quantum``).  10 µs: about what one iteration of
#: CPython's asyncio costs on a fast machine (a sleep(0) round trip; 8.6 µs
#: measured here on the stock loop), so a program that polls the clock while
#: it works gets through a second of it in about a second of real time, no
#: slower than on a real machine.  1 µs made websockets' sleep(0) busy-wait
#: test (0.2 s of polling, in asyncio's debug mode) take 37 s instead of 1.9 s
#: (0.2 s on the stock loop), and lost no more tests (docs/explanation/virtual-time.md).
DEFAULT_QUANTUM = 1e-5

#: The longest one real wait for work on another thread (then re-checked).
_MAX_WAIT = 24 * 3600

#: The timer-owner heap (a Timing with max_late) is compacted past this size.
_COMPACT_MIN = 64


class VirtualTimeError(RuntimeError):
    """A virtual-time run cannot go on."""


class DeadlockError(VirtualTimeError):
    """Nothing is ready, no timer is pending and no real work is outstanding:
    the program waits for something that can never happen."""


class TimeLimitError(VirtualTimeError):
    """The next timer lies beyond the run's virtual-time limit."""


def _check_seconds(name: str, value: Any, *, lo: float = 0.0, inf_ok: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or value < lo or (math.isinf(value) and not inf_ok):
        kind = "number" if inf_ok else "finite number"
        raise ValueError(f"{name} must be a {kind} >= {lo}, got {value!r}")
    return value


class _VirtualSelector:
    """Wraps the loop's selector: ``select(timeout)`` with a non-zero timeout
    (the loop has nothing ready and would sleep) jumps the virtual clock
    instead, unless real I/O is ready or outstanding work answers within
    ``autojump_threshold`` real seconds."""

    def __init__(self, sel, loop: VirtualEventLoop) -> None:
        self._sel = sel
        self._loop = loop
        self.register = sel.register
        self.unregister = sel.unregister
        self.modify = sel.modify
        self.get_key = sel.get_key
        self.get_map = sel.get_map

    def __getattr__(self, name: str):
        return getattr(self._sel, name)

    def close(self) -> None:
        self._sel.close()

    def select(self, timeout=None):
        events = self._wait(timeout)
        if events is None:  # the clock jumped to the next timer
            return []
        loop = self._loop
        if loop._quantum:
            # An iteration that did not sleep took time, as on a real
            # machine: the program works, and its clock moves.
            loop._step()
        return events

    def _wait(self, timeout):
        """The events, or None when the clock jumped to the next timer."""
        sel = self._sel
        if timeout is not None and timeout <= 0:
            return sel.select(0)
        loop = self._loop
        events = sel.select(0)
        if events:
            return events
        threshold = loop._autojump_threshold
        # busy: work handed to another thread (an executor or to_thread job,
        # anyio's to_thread.run_sync, a testing.outside() block); fds:
        # sockets, pipes, child processes; threads: a thread the program
        # started since the loop first ran.
        busy = loop._jobs > 0 or bool(loop._outside) or loop._anyio_jobs()
        fds = loop._outstanding()
        # A loop on a background thread (a portal's, a "server in a thread"
        # fixture's: aiosmtpd's Controller, anyio's blocking portal) is driven
        # by the main thread, which lives on and may call in at any moment
        # (call_soon_threadsafe: a portal's call or cancel, the server's
        # stop); it is known before the loop first ran, so it is not a new
        # thread, but it is waited for as one: idle, such a loop waits as the
        # stock loop does (a DeadlockError there killed the server's thread
        # while the test still used it).
        threads = loop._new_threads_alive() or loop._fed_from_the_main_thread()
        target = loop._next_timer()
        if busy and threshold > 0:
            # The clock may not run ahead of the thread's work: wait for it,
            # in real time, as long as the next timer is away in virtual time
            # (at least the threshold), then jump.
            if target is None or threshold == math.inf:
                return sel.select(None)  # the work will end the wait
            events = sel.select(min(max(threshold, target - loop._vtime), _MAX_WAIT))
            if events:
                return events
        elif fds or threads:
            if threshold == math.inf and not fds:
                # Never jump while such a thread lives, but look again after
                # a while: it may end without a word (not select(None)).
                return sel.select(1.0)
            loop._threshold_waits += 1
            events = sel.select(None if threshold == math.inf else threshold)
            if events:
                return events
        if target is None:
            if busy or fds:
                return sel.select(None)  # real work will end the wait
            if threads:
                # It may still deliver (call_soon_threadsafe): no DeadlockError
                # while it lives; look again after a while (not select(None):
                # it may end without a word).
                return sel.select(min(max(threshold, 0.01), 1.0))
            # Last chance for a thread the loop cannot see (one started by
            # the program itself) before calling it a deadlock.
            if threshold > 0:
                events = sel.select(min(threshold, 1.0))
                if events:
                    return events
            raise DeadlockError(loop._deadlock_message())
        loop._jump(target)
        return None


class _ChargedHandle(_events.Handle):
    """A ready callback that takes virtual time (a Timing's ``max_cost``)."""

    __slots__ = ()
    _loop: Any
    _callback: Any

    def _run(self) -> None:
        loop = self._loop
        timing = loop._timing
        if timing is None:  # made under a Timing the loop has given back since
            return super()._run()
        cost = timing._decide("step", loop._max_cost, self._site, loop._vtime)
        try:
            super()._run()
        finally:
            if cost:
                loop._charge(cost)

    def _site(self) -> str:
        return callback_site(self._callback)


class _ChargedTimer:
    """A timer's callback that takes virtual time (a Timing's ``max_cost``);
    the program's own callbacks only, not asyncio's (see _timing_call_at).

    A timer that falls due while the callbacks of an iteration run (the
    clock moved past its deadline by what they cost) was not among the
    timers that iteration set aside: it runs in the next one, after the
    callbacks made ready meanwhile -- the task steps this iteration's
    timers woke -- as on a punctual real loop whose callbacks take time.
    Without charging timer callbacks, a batch of timers ran in no time and
    only a late wake-up could bring a second timer due, merging it into
    the first one's batch, ahead of the steps the first one woke.

    It stands in for the callback in the handle: repr, ``==`` and hash are
    the callback's, so a handle reads as it would unwrapped."""

    __slots__ = ("_loop", "_callback", "_owner")

    def __init__(self, loop: VirtualEventLoop, callback, owner) -> None:
        self._loop = loop
        self._callback = callback
        self._owner = owner  # the task that scheduled it (names the site)

    def __call__(self, *args):
        loop = self._loop
        timing = loop._timing
        if timing is None:  # scheduled under a Timing the loop has given back since
            return self._callback(*args)
        cost = timing._decide("timer", loop._max_cost, self._site, loop._vtime)
        try:
            return self._callback(*args)
        finally:
            if cost:
                loop._charge(cost)

    def _site(self) -> str:
        return timer_site(self._callback, self._owner)

    def __repr__(self) -> str:
        return repr(self._callback)

    def __eq__(self, other):
        if isinstance(other, _ChargedTimer):
            other = other._callback
        return self._callback == other

    def __hash__(self) -> int:
        return hash(self._callback)


class VirtualEventLoop(WheelEventLoop):
    """A ``WheelEventLoop`` on virtual time.

    ``time()`` starts at ``start``.  When the loop has nothing to do it
    jumps straight to the next timer's deadline (``time() >= when`` after
    it).  Every other iteration of the loop (callbacks were ready, a timer
    was already due, I/O arrived) takes ``quantum`` virtual seconds (default
    10 µs), as on a fast real machine: a program that works sees its
    clock move, so one that polls the clock while it works
    (``while loop.time() < deadline: await asyncio.sleep(0)``) or re-arms a
    timer at a deadline it has reached (``call_at(close)`` while
    ``loop.time() <= close``) gets past the deadline, and a duration measured
    across an await is never 0.  ``quantum=0`` keeps the clock exactly on
    the deadlines (it then moves only by jumps, and by the cost a ``timing``
    charges callbacks), and such a program spins forever.  The clock never
    moves backwards.  The same program gives the same virtual timestamps, in
    the same order, every run.

    Real I/O still works.  While real work is outstanding (a file descriptor
    the loop watches besides its own wake-up pipe, a child process, a thread
    the program started during the run that is still alive), the loop waits
    up to ``autojump_threshold`` real seconds for it before jumping to the
    next timer (0: never wait; ``math.inf``: never jump while it is
    outstanding).  Work on another thread (a ``run_in_executor`` or
    ``to_thread`` job, a ``testing.outside()`` block) holds the clock back
    further: the loop waits for it as long, in real time, as the next timer
    is away in virtual time.  With no timer pending it waits for such work as
    long as it takes.

    ``limit``: the run may not go past ``start + limit`` virtual seconds
    (``TimeLimitError``; the quantum never carries the clock past it
    either).  A program left with nothing ready, no timer and no
    outstanding work raises ``DeadlockError`` naming the virtual time
    (after one last ``autojump_threshold`` wait for threads it cannot see).

    ``timing``: a ``Timing`` (see ``timings()``) perturbing the run.

    ``clocks`` (default True): while the loop runs, ``time.monotonic()``,
    ``perf_counter()``, ``time.time()`` (and their ``_ns`` twins) called on
    its thread advance with its virtual time; other threads see real time
    (see ``pywheel.testing._clocks``).  False: they stay real.
    """

    # Until BaseEventLoop.__init__ runs: a loop whose arguments were refused
    # is "closed" for __del__.
    _closed = True
    # Holding the cyclic collector off (a loop with a Timing, from its first
    # run until close(); see _gc).
    _gc_held = False

    def __init__(
        self,
        selector=None,
        *,
        start: float = 0.0,
        tick: float = 0.001,
        timing: Timing | None = None,
        limit: float | None = None,
        autojump_threshold: float = DEFAULT_AUTOJUMP_THRESHOLD,
        clocks: bool = True,
        quantum: float = DEFAULT_QUANTUM,
        trace: Any = None,
    ) -> None:
        start = _check_seconds("start", start)
        quantum = _check_seconds("quantum", quantum)
        if 0 < quantum < 1e-9:
            raise ValueError(
                f"quantum must be 0 or at least 1e-9 (the clock keeps whole "
                f"nanoseconds), got {quantum!r}"
            )
        if not isinstance(clocks, bool):
            raise TypeError(f"clocks must be True or False, not {type(clocks).__name__}")
        if timing is not None and not isinstance(timing, Timing):
            raise TypeError(
                f"timing must be a pywheel.testing.Timing (from timings()), "
                f"not {type(timing).__name__}"
            )
        self._autojump_threshold = _check_seconds(
            "autojump_threshold", autojump_threshold, inf_ok=True
        )
        self._limit_at = (
            math.inf if limit is None else start + _check_seconds("limit", limit, inf_ok=True)
        )
        self._vtime = start
        self._quantum = quantum
        self._tick = tick
        self._jobs = 0
        self._outside: set = set()  # testing.outside() blocks (any thread)
        self._known_threads: weakref.WeakSet | None = None  # alive when it first ran
        self._subprocesses: weakref.WeakSet = weakref.WeakSet()
        self._peers = _peers.Peers(self)
        #: Real waits of up to autojump_threshold for outstanding I/O or a
        #: thread (what tests count instead of timing the run).
        self._threshold_waits = 0
        self._timing: Timing | None = None
        self._trace: Any = None  # a testing.Trace recording the run (see _trace)
        self._max_late = self._max_cost = 0.0
        self._fatal: BaseException | None = None
        self._limit_hit = False
        self._clocks = _clocks.Clocks(self) if clocks else None
        if timing is not None:
            # Refused here, before a selector exists: a refused loop leaves
            # nothing to close (no ResourceWarning).
            timing._check_free(self)
        super().__init__(selector, tick=tick)
        self._selector: Any = _VirtualSelector(self._selector, self)
        # shutdown_asyncgens() closes them in the order they first ran, not
        # in address order (see _agens): the same run every time.
        self._asyncgens: Any = _agens.OrderedWeakSet()
        wheel = self._wheel
        self._next_timer = getattr(wheel, "next_when", None) or wheel.next_deadline
        self._wheel_call_at = wheel.call_at
        self._handle_type = _events.Handle
        self._fast_timers = True
        if timing is not None:
            self._use_timing(timing)
        if trace is not None and trace is not False:
            from . import _trace

            _trace.attach(self, trace)

    # ---- fast paths ---------------------------------------------------------
    # A fake-time test spends its time scheduling timers and waking tasks, so
    # these skip a frame or two of WheelEventLoop/BaseEventLoop when nothing
    # special applies (not debug, no timer tracking).  Anything unusual (a
    # closed loop, a bad argument, a deadline out of the wheel's range) makes
    # the C call fail without scheduling anything, and the general path then
    # does (or refuses) it as WheelEventLoop would.

    def call_soon(self, callback, *args, context=None):
        if self._closed or self._debug:
            return super().call_soon(callback, *args, context=context)
        handle = self._handle_type(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(self, delay, callback, *args, context=None):
        if self._fast_timers and not self._debug:
            try:
                return self._wheel_call_at(self._vtime + delay, callback, *args, context=context)
            except Exception:
                pass
        return super().call_later(delay, callback, *args, context=context)

    # ---- the clock ----------------------------------------------------------

    def time(self) -> float:
        """The virtual clock, in seconds."""
        return self._vtime

    @property
    def quantum(self) -> float:
        """Virtual seconds each iteration that does not jump takes."""
        return self._quantum

    @property
    def limit(self) -> float:
        """The virtual time the run may not pass (``inf``: no limit)."""
        return self._limit_at

    @property
    def timing(self) -> Timing | None:
        """The ``Timing`` perturbing this loop (``timing=``, or lent for a run by
        ``pytest --timing-fuzz``), or None: a punctual run."""
        return self._timing

    @property
    def trace(self):
        """The ``testing.Trace`` recording this loop's run (``trace=``), or None."""
        return self._trace

    @property
    def clocks(self) -> bool:
        """Whether the ``time`` module's clocks follow this loop's virtual
        time on its thread while it runs (see ``clocks=``)."""
        return self._clocks is not None

    def _jump(self, target: float) -> None:
        """Nothing ready, no I/O: wake at the next timer (late, with a Timing)."""
        if target > self._limit_at:
            raise TimeLimitError(self._limit_message(target))
        due = target
        if self._max_late and self._timing is not None:
            self._prune_timers()
            site = functools.partial(self._wake_site, target)
            late = self._timing._decide("wake", self._max_late, site, target)
            if late:
                woke = round(target + late, 9)
                if woke > self._limit_at:
                    # The late wake-up would carry the clock past the limit:
                    # the run ends here, as it does for a timer beyond it.
                    if not self._limit_hit:
                        self._limit_hit = True
                        raise TimeLimitError(
                            f"virtual time limit reached: waking {late!r} late for "
                            f"the timer due at t={target!r} would pass the limit "
                            f"t={self._limit_at!r} (now t={self._vtime!r}); the "
                            f"Timing's late wake-ups need a larger limit"
                            f"{self._limit_context(target)}"
                        )
                    woke = self._limit_at  # cleanup after the error: stay at it
                target = woke
        if target > self._vtime:
            self._vtime = target
        if self._trace is not None:
            self._trace._woke(due, self._vtime)

    def _step(self) -> None:
        """An iteration that did not jump took ``quantum`` seconds."""
        t = round(self._vtime + self._quantum, 9)  # whole nanoseconds, as _charge
        if t <= self._vtime:  # past 2**53 ns a nanosecond is below one float step
            t = math.nextafter(self._vtime, math.inf)
        self._advance(
            t,
            lambda: (
                f"virtual time limit reached: the program kept the loop busy "
                f"(each iteration that does not sleep takes quantum="
                f"{self._quantum!r} s) up to the limit t={self._limit_at!r}; a "
                f"program that never stops on its own needs a larger limit "
                f"or a way to end{self._limit_context()}"
            ),
        )

    def _charge(self, cost: float) -> None:
        """A ready callback took ``cost`` seconds (a Timing's ``max_cost``)."""
        self._advance(
            round(self._vtime + cost, 9),  # whole nanoseconds, as the wheel keeps deadlines
            lambda: (
                f"virtual time limit reached: callbacks charged by the Timing "
                f"(up to {self._max_cost!r} each) carried the clock to the "
                f"limit t={self._limit_at!r}; the Timing's costs need a larger "
                f"limit{self._limit_context()}"
            ),
        )

    def _advance(self, t: float, why) -> None:
        """The program's work moves the clock to ``t`` (an iteration's
        quantum, a Timing's cost).  Never past the limit: the clock stops at
        it, and the loop ends the run after this iteration with
        TimeLimitError(``why()``) (once; the cleanup that follows runs at the
        limit)."""
        if t > self._limit_at:
            t = self._limit_at
            if not self._limit_hit:
                self._limit_hit = True
                self._abort(TimeLimitError(why()))
        if t > self._vtime:
            self._vtime = t

    def _new_threads_alive(self) -> bool:
        """A thread started since this loop first ran is alive (not an
        executor's worker, whose jobs are counted, nor a foreign thread
        Python only knows as a dummy): it may deliver into the loop
        (call_soon_threadsafe), so it is waited for as a socket is."""
        known = self._known_threads
        if known is None or _threading.active_count() <= 1:
            return False
        # Thread objects, not idents: a new thread may reuse a dead one's
        # ident, and a known thread may have died since (so counting the
        # threads cannot stand in for this walk).
        workers = _executor_workers()
        me = _threading.get_ident()
        for t in _threading.enumerate():
            if (
                t not in known
                and t.ident != me
                and not isinstance(t, _threading._DummyThread)
                and t not in workers
            ):
                return True
        return False

    def _anyio_jobs(self) -> bool:
        """A job of anyio's ``to_thread.run_sync()`` is running for this loop.

        anyio runs those on worker threads of its own, not through
        ``run_in_executor``, so they are not counted in ``_jobs``; left to
        ``_new_threads_alive``, the clock jumped to the next timer after
        ``autojump_threshold`` while the job still worked (a 0.5 s job beside
        a 1 s timer read 1.0 s of virtual time, 0.5 s on a real clock).  A
        worker holds a job from the moment it is queued (its queue has an
        unfinished item) until the loop took its result, which puts it back
        on its idle list (``_report_result``, on this thread; the worker's
        own ``task_done()`` comes later, on its thread, and no wake-up
        follows it, so it cannot be what ends the job here); a stopping
        worker's queue holds the stop sentinel, which is no job.  Read from
        anyio's worker objects (anyio 4's ``WorkerThread``: ``loop``,
        ``queue``, ``idle_workers``, ``stopping``); where they differ,
        nothing is counted and such threads are waited for as any other new
        thread is."""
        backend = _sys.modules.get("anyio._backends._asyncio")
        worker = getattr(backend, "WorkerThread", None)
        if not isinstance(worker, type):
            return False
        for t in _threading.enumerate():
            if (
                isinstance(t, worker)
                and getattr(t, "loop", None) is self
                and not getattr(t, "stopping", True)
                and getattr(getattr(t, "queue", None), "unfinished_tasks", 0) > 0
                and t not in getattr(t, "idle_workers", (t,))
            ):
                return True
        return False

    def _fed_from_the_main_thread(self) -> bool:
        """The loop runs on a thread other than the main thread, which is
        alive: the main thread may still feed it or stop it (it started
        the loop's thread, and holds the loop), as threads the program
        started during the run may (``_new_threads_alive``)."""
        main = _threading.main_thread()
        return main.ident != _threading.get_ident() and main.is_alive()

    def _outside_begin(self, token) -> None:
        self._outside.add(token)

    def _outside_end(self, token) -> None:
        self._outside.discard(token)
        try:
            self._write_to_self()  # let the loop look again
        except Exception:  # closed meanwhile
            pass

    def _outstanding(self) -> bool:
        """Real work the loop waits for: watched fds besides the self-pipe
        that can hear from outside the process (a socket whose peer is in
        this process cannot: see ``_peers``), executor jobs, live child
        processes."""
        if self._jobs > 0:
            return True
        fdmap = self._selector._sel.get_map()
        if len(fdmap) > 1:
            ssock = getattr(self, "_ssock", None)
            own = ssock.fileno() if ssock is not None else -1
            watched = {fd: key.events for fd, key in fdmap.items() if fd != own}
            if self._peers.any_outside(watched):
                return True
        for t in self._subprocesses:
            if t.get_returncode() is None and not t.is_closing():
                return True
        return False

    def _deadlock_message(self) -> str:
        tasks = self._waiting_sites()
        return (
            f"deadlock at virtual time t={self._vtime!r}: no callback is ready, no timer "
            f"is pending and no I/O, executor job or child process is outstanding, so the "
            f"program waits for something that can never happen{tasks}"
        )

    def _waiting_sites(self, skip=()) -> str:
        """'; waiting: task in f() at x.py:3; ...' for the tasks not done
        (those in ``skip`` aside), at most five named."""
        waiting = [t for t in _tasks.all_tasks(self) if not t.done() and t not in skip]
        lines = [task_site(t) for t in waiting[:5]]
        more = f" (and {len(waiting) - 5} more)" if len(waiting) > 5 else ""
        return ("; waiting: " + "; ".join(lines) + more) if lines else ""

    def _timer_owners(self, whens: dict | None = None) -> tuple[list[str], set]:
        """Who the pending timers belong to, for an error message: each
        timer's callback where it was defined (``tick() defined at x.py:12``),
        or, for asyncio's own (a sleep's wake-up, a timeout), the task that
        waits on it; and those tasks.  Slow, and only for a run that ends:
        the wheel keeps no Python-visible list of its handles (keeping one
        would cost every timer what only a failing run needs), so this walks
        what the collector's traverse of the wheel visits -- each pending
        timer's callback and its arguments -- in no particular order.

        ``whens``, if given, gets each site's deadlines where they can be
        found without the wheel: a sleep's or ``wait_for``'s handle in the
        frames of the task that waits, an ``asyncio.timeout``'s own handle
        (a bare ``call_later`` callback's handle is the wheel's alone)."""
        tasks = [t for t in _tasks.all_tasks(self) if not t.done()]
        by_waiter = {}
        for t in tasks:
            fut = getattr(t, "_fut_waiter", None)
            if fut is not None:
                by_waiter[id(fut)] = t
        sites: list[str] = []
        owners: set = set()

        def add(site: str, handles=()) -> None:
            if site not in sites:
                sites.append(site)
            if whens is not None:
                for h in handles:
                    if _pending_handle(h):
                        whens.setdefault(site, set()).add(h.when())

        for obj in gc.get_referents(self._wheel):
            if isinstance(obj, tuple):  # a timer's arguments: a sleep's future
                for arg in obj:
                    task = by_waiter.get(id(arg))
                    if task is not None:
                        owners.add(task)
                        handles = () if whens is None else _handles_in(_await_frames(task))
                        add(f"{task_site(task)} (sleeping)", handles)
                continue
            if isinstance(obj, type) or not callable(obj):
                continue
            if isinstance(obj, _ChargedTimer):
                obj = obj._callback
            elif type(obj).__module__.startswith("pywheel."):
                continue  # the wheel's own (its error forwarder)
            if internal_callback(obj):
                # asyncio.timeout()'s expiry names the task it would cancel.
                timeout = getattr(obj, "__self__", None)
                task = getattr(timeout, "_task", None)
                if isinstance(task, _tasks.Task):
                    owners.add(task)
                    add(f"{task_site(task)} (a timeout)", [getattr(timeout, "_timeout_handler", 0)])
                continue
            add(_defined_at(obj))
        return sites, owners

    def _next_owner(self, target: float, sites: list[str], whens: dict) -> str:
        """'; the next timer, due at t=..., is <site>': whose timer the run
        would have woken for, where that can be told.  Under a Timing that
        wakes late the loop records every timer's owner; otherwise a site
        whose deadline was found is matched, and a lone site whose deadline
        could not be (a bare call_later callback) is the one by elimination."""
        due = "; the next timer is: "
        if self._max_late and self._timing is not None:
            self._prune_timers()
            timers = self._timers
            if timers and timers[0][0] == target:
                owner = timers[0][3]
                if isinstance(owner, _tasks.Task):
                    return due + task_site(owner)
                return due + _defined_at(owner)
        matched = [site for site in sites if target in whens.get(site, ())]
        if not matched:
            matched = [site for site in sites if site not in whens]
            if len(matched) > 1:
                return "; the next timer is one of: " + "; ".join(matched[:5])
        return due + matched[0] if matched else ""

    def _limit_context(self, target: float | None = None) -> str:
        """What every TimeLimitError ends with: the next timer's owner, when
        the run ends at a timer (``target``); whose timers are pending (a
        repeating one is what keeps such a run going); which tasks wait for
        something else; and, for a run the quantum or a Timing's costs carried
        to the limit, which callbacks were ready (what kept the loop busy)."""
        try:
            whens: dict = {}
            sites, owners = self._timer_owners(whens)
            nxt = "" if target is None else self._next_owner(target, sites, whens)
            shown = "; ".join(sites[:5]) + (f" (and {len(sites) - 5} more)" if sites[5:] else "")
            timers = f"; timers pending: {shown}" if sites else ""
            ready, busy = self._ready_sites()
            return nxt + timers + self._waiting_sites(skip=owners | busy) + ready
        except Exception as exc:  # a description must never hide the error
            return f"; (pending timers not named: {type(exc).__name__})"

    def _ready_sites(self) -> tuple[str, set]:
        """'; ready: task in spin() at x.py:5; ...': the callbacks queued to
        run (at most five named), and the tasks among them."""
        names: list[str] = []
        tasks = set()
        for handle in list(self._ready):
            if handle.cancelled():
                continue
            owner = getattr(handle._callback, "__self__", None)
            if isinstance(owner, _tasks.Task):
                tasks.add(owner)
            name = callback_site(handle._callback)
            if name not in names:
                names.append(name)
        more = " (and more)" if len(names) > 5 else ""
        return ("; ready: " + "; ".join(names[:5]) + more) if names else "", tasks

    def _limit_message(self, target: float) -> str:
        return (
            f"virtual time limit reached: the next timer is due at t={target!r}, "
            f"past the limit t={self._limit_at!r} (now t={self._vtime!r}); a "
            f"program that never stops on its own (a repeating timer?) needs a "
            f"larger limit or a way to end{self._limit_context(target)}"
        )

    def _set_limit(self, limit: float) -> None:
        """From now on the run may not pass ``limit`` more virtual seconds
        (the pytest plugin gives a loop that outlives a test a fresh
        per-test budget)."""
        limit = _check_seconds("limit", limit, inf_ok=True)
        self._limit_at = self._vtime + limit
        self._limit_hit = False

    # ---- lending a Timing (pytest --timing-fuzz on a loop shared by tests) ---
    #
    # A loop made before a fuzzed test runs (a module- or session-scoped
    # loop) takes that run's Timing while the test runs and gives it back
    # after, so every run perturbs the loop the test actually runs on.  Only
    # while the loop is not running: a Timing's decisions are numbered from
    # its loop's first run, and the overrides it installs (call_at, the
    # ready queue's handle type) must not change under a running iteration.
    # What the Timing left behind works on without it: charged handles and
    # timer callbacks already queued run uncharged once it is gone, timers
    # scheduled before it came are not charged (they were scheduled
    # punctually) but still wake late, and a late wake-up with no recorded
    # owner is named by its deadline.

    def _use_timing(self, timing: Timing) -> None:
        timing._attach(self, self._tick, self._abort)
        self._timing = timing
        self._max_late = timing.max_late
        self._max_cost = timing.max_cost
        if self._max_cost > 0:
            self._call_soon = self._charged_call_soon
            self._handle_type = _ChargedHandle
            self.call_at = self._timing_call_at  # type: ignore[method-assign]
            self._fast_timers = False
        if self._max_late > 0:
            self._timers: list = []
            self._seq = itertools.count()
            self._compact_at = _COMPACT_MIN
            self.call_at = self._timing_call_at  # type: ignore[method-assign]
            self._fast_timers = False
        if self._trace is not None:
            self._trace._hook(self)  # traced handles that are charged too

    def _lend_timing(self, timing: Timing) -> None:
        """Take ``timing`` for a while (``_return_timing`` gives it back)."""
        if self._closed or self.is_running() or self._timing is not None:
            raise RuntimeError(
                f"a Timing can be lent only to a loop that is open, not running and "
                f"has none: {self!r}"
            )
        self._use_timing(timing)

    def _return_timing(self) -> None:
        """Give back the Timing: the loop runs punctually from now on, and
        the cyclic collector is released (see _gc).  The Timing keeps its
        record (it replays, and its repr names its decisions)."""
        if self.is_running():
            raise RuntimeError(f"cannot give back the Timing of a running loop: {self!r}")
        timing, self._timing = self._timing, None
        self.__dict__.pop("call_at", None)
        self.__dict__.pop("_call_soon", None)
        self._handle_type = _events.Handle
        self._fast_timers = True
        if self._max_late:
            self._timers = []
        self._max_late = self._max_cost = 0.0
        if timing is not None:
            timing._detach(self)
        _gc.release(self)
        if self._trace is not None:
            self._trace._hook(self)  # the Timing's hooks are gone, the trace's stay

    # ---- timing hooks -------------------------------------------------------

    def _charged_call_soon(self, callback, args, context):
        handle = self._handle_type(callback, args, self, context)  # charged or traced
        if handle._source_traceback:
            del handle._source_traceback[-1]
        self._ready.append(handle)
        return handle

    def _timing_call_at(self, when, callback, *args, context=None):
        """call_at under a Timing: a timer whose callback is charged
        (max_cost), and whose owner is kept for naming its wake-up
        (max_late)."""
        owner = _tasks.current_task(self) if self.is_running() else None
        run = callback
        # asyncio's own timer callbacks (a sleep's wake-up, a timeout) are
        # not charged: they resolve a future, and the program's work, and
        # its cost, is in the step they wake.  Charging them too was
        # tried: every sleep then carried two decisions instead of one, and
        # the corpus bugs were found less often and shrank to more.
        if self._max_cost and callable(callback) and not internal_callback(callback):
            # (the wheel refuses what is not callable)
            if self._debug:
                self._check_callback(callback, "call_at")  # before it is hidden
            run = _ChargedTimer(self, callback, owner)
        if self._trace is not None and callable(callback):
            run = self._trace._timer(self, callback, owner, when, run is not callback)
        handle = WheelEventLoop.call_at(self, when, run, *args, context=context)
        if not self._max_late:
            return handle
        timers = self._timers
        heapq.heappush(timers, (handle.when(), next(self._seq), handle, owner or callback))
        if len(timers) >= self._compact_at:
            self._compact_timers()
        return handle

    # Who owns each timer, for naming the site of a late wake-up.  An entry
    # is live while its handle is pending at the entry's deadline; it goes
    # stale when the handle runs, is cancelled, or moves (reschedule(), which
    # bypasses call_at).  A deadline at or before the clock is never the
    # subject of a wake-up (the loop only sleeps toward a timer in the
    # future), so entries up to now can go whatever became of them.  Stale
    # entries leave the top at every wake-up decision, zero or not, and the
    # whole heap is compacted whenever it doubles past what was live at the
    # last compaction: its size stays within twice what is pending (plus
    # _COMPACT_MIN), amortised O(1) per timer.

    def _live(self, entry) -> bool | None:
        """True: pending at the entry's deadline; False: stale; None: moved
        into the future (still pending, at handle.when())."""
        when, _, handle, _ = entry
        if when <= self._vtime or handle.cancelled():
            return False
        now_when = handle.when()
        if now_when == when:
            return True
        return None if now_when > self._vtime else False

    def _prune_timers(self) -> None:
        timers = self._timers
        while timers:
            live = self._live(timers[0])
            if live:
                return
            entry = heapq.heappop(timers)
            if live is None:  # moved: a fresh place among equal deadlines
                heapq.heappush(timers, (entry[2].when(), next(self._seq), entry[2], entry[3]))

    def _compact_timers(self) -> None:
        kept = []
        for entry in self._timers:
            live = self._live(entry)
            if live:
                kept.append(entry)
            elif live is None:
                kept.append((entry[2].when(), entry[1], entry[2], entry[3]))
        heapq.heapify(kept)
        self._timers = kept
        self._compact_at = max(_COMPACT_MIN, 2 * len(kept))

    def _wake_site(self, target: float) -> str:
        timers = self._timers
        self._prune_timers()
        if not timers:
            return f"the timer due at t={target!r}"
        owner = timers[0][3]
        if isinstance(owner, _tasks.Task):
            return task_site(owner)
        return callback_site(owner)

    def _external_jitter(self, site) -> float:
        if self._timing is None or not self._timing.max_jitter:
            return 0.0
        return self._timing._decide("external", self._timing.max_jitter, site, self._vtime)

    def _abort(self, exc: BaseException) -> None:
        """A draw failed: end the run, and raise ``exc`` from run_forever."""
        if self._fatal is None:
            self._fatal = exc
        self.stop()

    def run_until_complete(self, future):
        start = self._vtime
        try:
            return super().run_until_complete(future)
        except VirtualTimeError as exc:
            _surface(exc, future)
            raise
        except Exception as exc:
            _note_virtual_time(exc, start, self._vtime)
            raise

    def run_forever(self) -> None:
        hook = on_run
        if hook is not None and not self._closed and not self.is_running():
            hook(self)  # pytest --timing-fuzz: may lend this loop a Timing
        if self._known_threads is None:
            self._known_threads = weakref.WeakSet(_threading.enumerate())
        if self._timing is not None:
            self._timing._started(self)
            if not self._closed:  # (a closed loop refuses to run, and is never closed again)
                _gc.hold(self)  # until close(): a replay meets the same events (see _gc)
        clocks = self._clocks
        if clocks is None:
            super().run_forever()
        else:
            previous = _clocks.enter(clocks)
            try:
                super().run_forever()
            finally:
                _clocks.leave(clocks, previous)
        fatal = self._fatal
        if fatal is not None:
            self._fatal = None  # raised once; cleanup then runs punctually
            raise fatal

    # ---- real work the loop waits for -----------------------------------------

    def run_in_executor(self, executor, func, *args):
        fut = super().run_in_executor(executor, func, *args)
        self._jobs += 1
        fut.add_done_callback(self._job_done)
        return fut

    def _job_done(self, fut) -> None:
        self._jobs -= 1

    async def shutdown_default_executor(self, *args, **kwargs):
        self._jobs += 1
        try:
            return await super().shutdown_default_executor(*args, **kwargs)
        finally:
            self._jobs -= 1

    async def _make_subprocess_transport(self, *args, **kwargs):
        transport = await super()._make_subprocess_transport(*args, **kwargs)
        self._subprocesses.add(transport)
        return transport

    def close(self) -> None:
        super().close()
        # What a Timing adds is a reference cycle through this loop: its
        # overrides are bound methods of the loop in its own __dict__, and the
        # timer owners kept for naming late wake-ups are tasks, which hold
        # their loop.  Left, they would keep the closed loop (and all it
        # holds) for the cyclic collector.  Closed, the loop schedules nothing:
        # the class's methods refuse as a closed loop does, and no timer is
        # left to name.
        self.__dict__.pop("call_at", None)
        self.__dict__.pop("_call_soon", None)
        if self._max_late:
            self._timers = []
        if self._timing is not None:
            self._timing._detach(self)
        _gc.release(self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} t={self._vtime!r} running={self.is_running()} "
            f"closed={self.is_closed()}>"
        )


#: Called with each VirtualEventLoop about to run (``run_forever``), when
#: set: the pytest plugin counts the loops a fuzzed test runs and lends a
#: loop made before the test its run's Timing (see ``_session``).
on_run = None


def _await_frames(task) -> list:
    """The frames of a task's await chain, outermost first."""
    frames = []
    coro = task.get_coro()
    while coro is not None and len(frames) < 64:
        frame = (
            getattr(coro, "cr_frame", None)
            or getattr(coro, "ag_frame", None)
            or getattr(coro, "gi_frame", None)
        )
        if frame is None:
            break
        frames.append(frame)
        coro = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "ag_await", None)
            or getattr(coro, "gi_yieldfrom", None)
        )
    return frames


def _pending_handle(h) -> bool:
    """A timer handle (pywheel's or asyncio's) still pending."""
    return (
        type(h).__name__.endswith("TimerHandle")
        and callable(getattr(h, "when", None))
        and not h.cancelled()
    )


def _handles_in(frames) -> list:
    """The pending timer handles the frames hold in their locals (a sleep's
    ``h``, ``wait_for``'s ``timeout_handle``)."""
    found = []
    for frame in frames:
        try:
            values = list(frame.f_locals.values())
        except Exception:
            continue
        found += [v for v in values if _pending_handle(v)]
    return found


def _defined_at(callback) -> str:
    """'tick() defined at x.py:12' (a callable object: its class's __call__)."""
    func = getattr(callback, "func", callback)  # functools.partial
    func = getattr(func, "__func__", func)  # a bound method
    code = getattr(func, "__code__", None)
    for klass in type(func).__mro__ if code is None else ():
        call = vars(klass).get("__call__")
        if call is not None:
            code = getattr(call, "__code__", None)
            break
    name = callback_site(callback)
    if code is None:
        return name
    return f"{name} defined at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"


def _surface(exc: VirtualTimeError, future) -> None:
    """The loop's error ends its traceback where the program waits: the
    frames of the task ``run_until_complete`` waits for (the test), each
    coroutine it awaits, and on into a task it awaits, innermost last.

    The loop raises it from inside its own iteration, where no frame of the
    program is on the stack: the traceback held only the loop's frames,
    and pytest's report, which starts at the test's own frame when it finds
    one, printed all of them instead.  The frames are appended after the
    loop's (pytest hides those, and shows everything with --full-trace), as
    if the error had been thrown in at the await -- it is not: nothing runs
    in the program, which is left as it was for the cleanup that follows.
    Once per exception."""
    if getattr(exc, "_pywheel_surfaced", False):
        return
    frames = []
    seen = 0
    task = future
    while isinstance(task, asyncio.Task) and not task.done() and seen < 8:
        seen += 1
        frames += _await_frames(task)
        task = getattr(task, "_fut_waiter", None)
    # Where it waits inside asyncio (Event.wait(), a sleep) is not the
    # program's story: it ends at its own innermost await.
    while len(frames) > 1 and internal_code(frames[-1].f_code):
        frames.pop()
    tb = exc.__traceback__
    if not frames or tb is None:
        return
    try:
        chain = None
        for frame in reversed(frames):
            chain = types.TracebackType(chain, frame, frame.f_lasti, frame.f_lineno)
        while tb.tb_next is not None:
            tb = tb.tb_next
        tb.tb_next = chain
        exc._pywheel_surfaced = True  # type: ignore[attr-defined]
    except Exception:  # a traceback is help, never a reason to fail differently
        pass


_NOTE = "pywheel.testing: the run "


def _note_virtual_time(exc: BaseException, start: float, now: float) -> None:
    """A failure's report says when, on virtual time, the run ended (PEP 678
    note: pytest and the traceback module print it).  Not for the loop's own
    errors, whose message already says, nor twice for one exception."""
    if isinstance(exc, VirtualTimeError):
        return
    notes = getattr(exc, "__notes__", None)
    if notes and any(isinstance(n, str) and n.startswith(_NOTE) for n in notes):
        return
    try:
        exc.add_note(f"{_NOTE}ended at virtual time t={now!r} (it started at t={start!r})")
    except Exception:  # an exception type that refuses notes: report it as it is
        pass


def _executor_workers():
    """ThreadPoolExecutor's worker threads (idle or not: their jobs are
    counted where they are submitted)."""
    try:
        from concurrent.futures import thread as _cf_thread

        return _cf_thread._threads_queues
    except (ImportError, AttributeError):  # pragma: no cover - other Pythons
        return ()


class outside:
    """Declares real work outside the loop, for as long as the block runs::

        with testing.outside():           # in the loop's thread
            start_my_worker_thread(fut)   # delivers with call_soon_threadsafe
            result = await fut

    While any such block is open, a ``VirtualEventLoop`` does not let its
    clock run ahead of the work: it waits for it, in real time, as long as
    its next timer is away in virtual time (and with no timer, as long as it
    takes; never a ``DeadlockError``).  ``loop``: the loop to tell (default:
    the running loop; pass it to use the block from another thread).  On
    any other loop it does nothing."""

    __slots__ = ("_loop", "_token")

    def __init__(self, loop=None) -> None:
        if loop is None:
            loop = _events.get_running_loop()
        self._loop = loop if isinstance(loop, VirtualEventLoop) else None
        self._token = None

    def __enter__(self):
        if self._token is not None:
            raise RuntimeError("this outside() block is already open")
        self._token = object()
        if self._loop is not None:
            self._loop._outside_begin(self._token)
        return self

    def __exit__(self, *exc_info) -> None:
        token, self._token = self._token, None
        if self._loop is not None and token is not None:
            self._loop._outside_end(token)


def new_event_loop(**kwargs: Any) -> VirtualEventLoop:
    """``VirtualEventLoop(**kwargs)``: for ``asyncio.Runner(loop_factory=
    functools.partial(new_event_loop, timing=t))`` and the like."""
    return VirtualEventLoop(**kwargs)


def _make_policy() -> type:
    class EventLoopPolicy(_policy_base()):  # type: ignore[misc]
        """Makes ``asyncio.new_event_loop()`` create ``VirtualEventLoop(**kwargs)``.
        Deprecated with asyncio's policy system (3.14; gone in 3.16): pass
        ``loop_factory=functools.partial(pywheel.testing.new_event_loop,
        **kwargs)`` instead."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__()
            self._kwargs = kwargs

        def new_event_loop(self) -> VirtualEventLoop:
            return VirtualEventLoop(**self._kwargs)

    EventLoopPolicy.__module__ = "pywheel.testing"
    EventLoopPolicy.__qualname__ = "EventLoopPolicy"
    return EventLoopPolicy


def policy(depth: int) -> type:
    """``EventLoopPolicy``, made on first use (see pywheel.asyncio's
    ``__getattr__``: importing never touches asyncio's deprecated names);
    a deprecation warning, where due, points ``depth`` frames up."""
    return _lazy_policy(
        "pywheel.testing",
        "EventLoopPolicy",
        _make_policy,
        "asyncio.Runner(loop_factory=pywheel.testing.new_event_loop) or pywheel.testing.run()",
        stacklevel=depth + 2,
    )


def __getattr__(name: str) -> Any:
    if name == "EventLoopPolicy":
        return policy(2)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(
    main: Coroutine[Any, Any, _T],
    *,
    start: float = 0.0,
    tick: float = 0.001,
    timing: Timing | None = None,
    limit: float | None = None,
    autojump_threshold: float = DEFAULT_AUTOJUMP_THRESHOLD,
    clocks: bool = True,
    debug: bool | None = None,
    quantum: float = DEFAULT_QUANTUM,
    trace: Trace | None = None,
) -> _T:
    """``asyncio.run(main)`` on virtual time; returns ``main``'s result.
    ``trace``: a ``testing.Trace`` that records the run (see ``Trace``)."""
    # Checked before the Runner exists, so a bad argument leaves no
    # un-awaited coroutine behind without saying why.
    try:
        running = _events._get_running_loop()
        if running is not None:
            raise RuntimeError(
                f"pywheel.testing.run() cannot be called while an event loop is running "
                f"in this thread ({running!r}): it starts a virtual-time loop of its own. "
                f"In async code, await the coroutine; in a test, make the test a plain "
                f"def that calls run(), or mark the async def test with "
                f"@pytest.mark.virtual_time"
            )
        if trace is True:
            raise TypeError(
                "run(trace=True) would record into a Trace nobody can read: pass one, "
                "tr = testing.Trace(); testing.run(main(), trace=tr), then read tr"
            )
        loop = VirtualEventLoop(
            start=start,
            tick=tick,
            timing=timing,
            limit=limit,
            autojump_threshold=autojump_threshold,
            clocks=clocks,
            quantum=quantum,
            trace=trace,
        )
    except BaseException:
        if asyncio.iscoroutine(main):
            main.close()  # refused before it could run: no "never awaited" noise
        raise
    try:
        with asyncio.Runner(debug=debug, loop_factory=lambda: loop) as runner:
            return runner.run(main)
    finally:
        if not loop.is_closed():  # main was not a coroutine: the Runner never ran
            loop.close()
