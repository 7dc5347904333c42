"""rloop with its timers on a timing wheel.

``from pywheel import rloop`` in place of ``import rloop``: ``Loop``,
``new_event_loop()``, ``run()`` and ``EventLoopPolicy`` (where asyncio still
has policies) give rloop's loop with every ``call_later`` and ``call_at`` on a
pywheel wheel the loop drives itself.  Everything else (the ready queue, the
I/O, sockets, subprocesses, signals, the exception handler) is rloop's,
untouched.

How the wheel is driven: one rloop timer (rloop's own ``_call_later``) is
armed for the wheel's next deadline.  It is re-armed only when a new timer's
deadline comes before it, and after it fired; a cancel does not touch it (at
worst it wakes once for nothing).  rloop runs a timer that fell due after the
callbacks that were ready and the I/O callbacks of the same iteration, in one
batch; the armed timer runs the wheel there, so the wheel's timers run where
rloop's own would, in exact-deadline order.

A timer whose deadline ``loop.time()`` has reached when it is scheduled
(``call_later(0)``, a negative delay, a past ``call_at``) is what rloop makes
a ``call_soon``: a "soon" timer of the wheel, and one ready callback queued
for it through rloop's ``call_soon``, which runs it there if it is still
pending (as pywheel.uvloop does).

The clock is rloop's: ``loop.time()``, microseconds since the loop was made,
read live (rloop caches nothing per iteration).  A timer runs once
``loop.time() >= when()``, never before; ``when()`` is the deadline asked
for, exactly, as on asyncio (rloop's reads its microsecond deadline).

What pywheel's fast path (C) cannot hand to rloop: a positive ``inf`` delay
or deadline, or one beyond about 3.4e32 s, never runs here, as on asyncio;
rloop 0.5 runs it at once (its microsecond count saturates to zero).  NaN,
numbers that are not ``int``/``float``, a callback that is not callable and
a closed loop are rloop's own ``call_later``/``call_at``, errors included.
Nor does it copy an rloop 0.5 bug: ``cancel()`` on the handle of a
``call_soon`` with exactly one argument (so of ``call_later(0, f, x)``) does
nothing there, the callback runs; here a cancelled timer never runs.

A timer's exception reaches the loop's exception handler as rloop reports a
callback's: ``call_exception_handler({"exception", "message", "handle"})``
(rloop then calls a handler set with ``set_exception_handler`` with the
context alone).  The message names the done ``pywheel.TimerHandle``, where
rloop's names the callback: the wheel's report does not carry it.
KeyboardInterrupt and SystemExit from a timer are reported too, as rloop
reports them, and the loop goes on.

Needs rloop: ``pip install 'pywheel[rloop]'``.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

try:
    import rloop as _rloop
    from rloop.loop import RLoop as _RLoop
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "pywheel.rloop needs rloop, which is not installed: pip install 'pywheel[rloop]'",
        name=__name__,
    ) from _exc

from . import _core
from . import asyncio as _pwa

__all__ = ["Loop", "new_event_loop", "run"]

_inf = math.inf
# rloop's own methods, reached past our overrides.
_rl_call_later = _RLoop.call_later
_rl_call_at = _RLoop.call_at
_rl_call_soon = _RLoop.call_soon
_rl_time = _RLoop.time
_rl_timer = _RLoop._call_later  # (delay, callback, args, context): rloop's timer heap
# The deadlines the wheel holds: |t| < 2**63 ns, with room for the clock.
_LIMIT = 9.0e9
# The armed rloop timer is set this much after the deadline: rloop counts
# whole microseconds from its clock, so a deadline between two of them must
# not be woken for one microsecond early (it would only re-arm: see
# _on_timer, which runs only what time() has reached).
_SLACK = 1e-6


class Loop(_RLoop):
    """An ``rloop.RLoop`` whose ``call_later``/``call_at`` go to a pywheel wheel.

    Their handles are ``pywheel.TimerHandle`` objects with the surface of
    asyncio's (``when()``, ``cancel()``, ``cancelled()``, ``get_context()``).
    ``wheel`` is the loop's wheel (``len()``: pending timers; ``stats()``:
    its counters).
    """

    def __init__(self) -> None:
        super().__init__()
        # The wheel's bucket is a millisecond; the deadlines stay exact.
        self._wheel = _core.ManualWheel(0.001, start=max(0.0, _rl_time(self)))
        self._wheel._stock_handles()
        # The rloop timer armed for the wheel and the deadline it is for
        # (inf: none).
        self._rl_timer: Any = None
        self._armed = _inf
        self._timer_ctx = contextvars.Context()
        # call_later/call_at in C (see _bind_timers), with rloop's clock,
        # _arm and rloop's call_soon: _timers.arm_below is what a new
        # deadline is compared with (the armed one, or -inf while the wheel
        # runs: it arms for its next deadline when done).
        self._timers = _core._LoopTimers(
            self._wheel, self, Loop.call_later, Loop.call_at, _rl_time, Loop._arm, _rl_call_soon
        )
        self._soon_ctx = contextvars.Context()
        self._wheel.set_exception_handler(_pwa._TimerErrorForwarder(self))  # type: ignore[arg-type]
        self._bind_timers()

    @property
    def wheel(self) -> _core.ManualWheel:
        """The loop's wheel: ``len()`` is the number of pending timers, and
        ``stats()`` its counters."""
        return self._wheel

    def _bind_timers(self) -> None:
        """While the loop is open, call_later and call_at are the C ones
        (``_core._LoopTimers``: the common call -- a float or int, a
        callable, at most context= -- scheduled in C; everything else handed
        to the Python methods below), set on the instance; once closed, the
        Python methods (which hand the call to rloop's).  Only for a class
        that keeps this class's call_later, call_at and _arm; a method
        someone set on the instance is left alone.  (rloop has no debug
        mode: its set_debug does nothing, and so nothing changes here.)"""
        timers = self.__dict__.get("_timers")
        if timers is None:
            return
        cls = type(self)
        plain = (
            cls.call_later is Loop.call_later
            and cls.call_at is Loop.call_at
            and cls._arm is Loop._arm
        )
        ok = plain and not self.is_closed()
        attrs = self.__dict__
        for name in ("call_later", "call_at"):
            method = getattr(timers, name)
            current = attrs.get(name)
            if not ok:
                if current is not None and getattr(current, "__self__", None) is timers:
                    del attrs[name]
            elif current is None:
                attrs[name] = method
        timers._set_plain(ok, ok)

    def call_later(self, delay, callback, *args, context=None):
        """rloop's ``call_later``, on the loop's wheel: returns a
        ``pywheel.TimerHandle``."""
        # The hot path is loop.c's; this one serves the rest.  What the
        # wheel cannot hold, or what is not a plain number or callback, is
        # rloop's (its errors, its handles, its treatment of NaN and of
        # huge delays), as is everything on a closed loop.
        if isinstance(delay, (int, float)) and callable(callback) and not self.is_closed():
            try:
                now = _rl_time(self)
                when = now + delay
                if -_LIMIT < when < _LIMIT:
                    return self._schedule(when, delay <= 0, callback, args, context)
            except OverflowError:
                pass
        return _rl_call_later(self, delay, callback, *args, context=context)

    def call_at(self, when, callback, *args, context=None):
        """rloop's ``call_at``, on the loop's wheel: returns a
        ``pywheel.TimerHandle``."""
        if (
            isinstance(when, (int, float))
            and callable(callback)
            and not self.is_closed()
            and -_LIMIT < when < _LIMIT
        ):
            return self._schedule(when, when <= _rl_time(self), callback, args, context)
        return _rl_call_at(self, when, callback, *args, context=context)

    def _schedule(self, when, soon, callback, args, context):
        wheel = self._wheel
        if soon:
            timer = wheel._call_soon_at(when, callback, *args, context=context)
            try:
                _rl_call_soon(self, wheel._run_soon, timer, context=self._soon_ctx)
            except BaseException:
                timer.cancel()  # it would never run
                raise
            return timer
        timer = wheel.call_at(when, callback, *args, context=context)
        if when < self._timers.arm_below:
            self._arm(when)
        return timer

    def _arm(self, when: float) -> None:
        """Make sure the loop wakes for a deadline `when`, earlier than the
        one armed: (re)start the rloop timer for it.  A deadline that is due
        already gets delay 0: rloop runs it in the next iteration's timer
        batch, where its own due timer would run."""
        if when >= self._armed:
            return
        old = self._rl_timer
        if old is not None:
            old.cancel()
        delay = when - _rl_time(self)
        delay = delay + _SLACK if delay > 0 else 0
        self._rl_timer = _rl_timer(self, delay, self._on_timer, (), self._timer_ctx)
        self._armed = when
        self._timers.arm_below = when

    def _on_timer(self) -> None:
        """The rloop timer fired, in rloop's timer batch: runs, in
        exact-deadline order, every timer with when() <= time(); what they
        schedule waits for a later iteration.  Then arms for the next
        deadline."""
        self._rl_timer = None
        self._armed = _inf
        timers = self._timers
        timers.arm_below = -_inf  # nothing to arm while running: armed after
        wheel = self._wheel
        now = _rl_time(self)
        bound = now if now > wheel.time() else wheel.time()
        try:
            while True:
                try:
                    wheel.run_due(bound)
                    break
                except BaseException as exc:  # noqa: BLE001 - rloop's rule
                    # The wheel reports a timer's Exception itself and hands
                    # out the rest (KeyboardInterrupt, SystemExit...), keeping
                    # the timers after it due; rloop reports those too, from
                    # any callback, and goes on.  (The wheel's report has no
                    # callback to name: see _on_timer_error.)
                    self._report(exc, None)
        finally:
            timers.arm_below = _inf
            nxt = wheel.next_when()
            if nxt is not None and not self.is_closed():
                self._arm(nxt)

    def _report(self, exc: BaseException, handle) -> None:
        """A timer's error as rloop reports a callback's: the loop's
        call_exception_handler, with rloop's keys in rloop's order."""
        self.call_exception_handler(
            {"exception": exc, "message": f"Exception in callback {handle!r}", "handle": handle}
        )

    def _on_timer_error(self, context: dict) -> None:
        """The wheel's report of a timer's exception.  rloop names the
        callback in the message; the wheel's report carries only the done
        handle (a "callback" key is used if the wheel ever gives one)."""
        handle = context.get("handle")
        self.call_exception_handler(
            {
                "exception": context.get("exception"),
                "message": f"Exception in callback {context.get('callback', handle)!r}",
                "handle": handle,
            }
        )

    def close(self) -> None:
        super().close()
        if self.is_closed():
            self._bind_timers()  # closed: rloop's own methods from now on
            timer = self._rl_timer
            if timer is not None:
                timer.cancel()
                self._rl_timer = None
            self._wheel.close()


def new_event_loop() -> Loop:
    """A new ``pywheel.rloop.Loop``."""
    return Loop()


_T = TypeVar("_T")


def run(
    main: Coroutine[Any, Any, _T],
    *,
    loop_factory: Callable[[], _RLoop] | None = new_event_loop,
    debug: bool | None = None,
) -> _T:
    """``asyncio.run(main)`` on a ``pywheel.rloop.Loop`` (rloop has no
    ``run()`` of its own): an ``asyncio.Runner`` with this module's loop."""
    with asyncio.Runner(debug=debug, loop_factory=loop_factory) as runner:
        return runner.run(main)


# ---- EventLoopPolicy, where asyncio still has policies -----------------------
#
# Made on first access, through pywheel.asyncio's lazy policy (no deprecated
# name touched at import), as pywheel.uvloop's.


def _make_policy() -> type:
    _pwa._policy_base()  # AttributeError where asyncio has no policies
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        base = _rloop.EventLoopPolicy

    class EventLoopPolicy(base):  # type: ignore[misc, valid-type]
        """rloop's policy, making ``pywheel.rloop.Loop``s.  Deprecated with
        asyncio's policy system: use ``pywheel.rloop.run()``."""

        def _loop_factory(self) -> Loop:
            return new_event_loop()

    EventLoopPolicy.__module__ = __name__
    EventLoopPolicy.__qualname__ = "EventLoopPolicy"
    return EventLoopPolicy


def __getattr__(name: str) -> Any:
    if name == "EventLoopPolicy":
        return _pwa._lazy_policy(__name__, name, _make_policy, "pywheel.rloop.run()")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
