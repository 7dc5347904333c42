"""uvloop with its timers on a timing wheel.

``from pywheel import uvloop`` in place of ``import uvloop``: ``Loop``,
``new_event_loop()`` and ``run()`` (``install()`` and ``EventLoopPolicy``
where uvloop still has them) are uvloop's, with every ``call_later`` and
``call_at`` on a pywheel wheel the loop drives itself.  Everything else (the
I/O, DNS, subprocesses, signals) is uvloop's, untouched.

How the wheel is driven: one libuv timer (uvloop's own ``call_later``) is
armed for the wheel's next deadline, rounded *up* to libuv's millisecond.  It
is re-armed only when a new timer's deadline comes before it, and after it
fired; a cancel does not touch it (at worst it wakes once for nothing).  When
it fires it queues one ready callback, so the timers that fell due run after
the callbacks that were ready before them, in exact-deadline order, as on
``WheelEventLoop``; a timer scheduled for a time already past queues that
callback at once (uvloop runs such a timer as a ``call_soon`` too).

The clock is uvloop's: ``loop.time()`` is libuv's, in whole milliseconds,
unchanged.  A timer runs once ``loop.time() >= when()``, never before (uvloop
itself rounds a delay to the *nearest* millisecond, so it can run up to half
a millisecond before the deadline asked for); ``when()`` is the deadline
asked for, exactly, as on asyncio (uvloop's reads its rounded millisecond).

Needs uvloop: ``pip install 'pywheel[uvloop]'``.
"""

from __future__ import annotations

import asyncio
import math
import sys
import warnings
from asyncio import coroutines as _coroutines
from asyncio import events as _events
from typing import Any

try:
    import uvloop as _uvloop
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "pywheel.uvloop needs uvloop, which is not installed: pip install 'pywheel[uvloop]'",
        name=__name__,
    ) from _exc

from . import _core
from . import asyncio as _pwa

__all__ = ["Loop", "new_event_loop", "run"]

_inf = math.inf
_ceil = math.ceil
# uvloop's own methods, reached past our overrides.  (uvloop's call_at calls
# self.call_later, which would be ours: the libuv timer is armed through
# uvloop's call_later, by the class, never through self.)
_uv_call_later = _uvloop.Loop.call_later
_uv_call_soon = _uvloop.Loop.call_soon
_uv_time = _uvloop.Loop.time


# The check asyncio's own call_at makes in debug mode: from 3.14 its public
# asyncio.iscoroutinefunction warns (deprecated), and the loop uses the
# private twin, which 3.11-3.13 do not have.
_iscoroutinefunction = getattr(_coroutines, "_iscoroutinefunction", _coroutines.iscoroutinefunction)


class Loop(_uvloop.Loop):
    """A ``uvloop.Loop`` whose ``call_later``/``call_at`` go to a pywheel wheel.

    Their handles are ``pywheel.TimerHandle`` objects with the surface of
    asyncio's and uvloop's (``when()``, ``cancel()``, ``cancelled()``,
    ``get_context()``); in debug mode ``asyncio.TimerHandle`` objects, with
    asyncio's source tracebacks and slow-callback warnings.  ``wheel`` is the
    loop's wheel (``len()``: pending timers; ``stats()``: its counters).
    """

    def __init__(self) -> None:
        # One tick per libuv millisecond: the wheel's bucket is the clock's
        # resolution (the deadlines themselves stay exact).
        self._wheel = _core.ManualWheel(0.001, start=max(0.0, _uv_time(self)))
        self._wheel._stock_handles()
        # The libuv timer armed for the wheel (a uvloop TimerHandle), the
        # loop.time() it fires at (inf: none; -inf: a run is queued instead).
        self._uv_timer: Any = None
        self._uv_fires = _inf
        # call_later/call_at in C (see _bind_timers), and the state they
        # share with the Python methods: _timers.arm_below is what a new
        # deadline is compared with -- _uv_fires, or -inf while a run of the
        # wheel is queued (nothing to arm then) -- and _arm is called only
        # for one before it.
        self._timers = _core._LoopTimers(
            self._wheel, self, Loop.call_later, Loop.call_at, _uv_time, Loop._arm
        )
        self._run_queued = False
        self._current_handle = None  # debug mode, as asyncio's loops
        self._pw_debug = False  # uvloop's _debug, which Python cannot read
        super().__init__()
        self._wheel.set_exception_handler(_pwa._TimerErrorForwarder(self))  # type: ignore[arg-type]
        self._bind_timers()

    @property
    def wheel(self) -> _core.ManualWheel:
        """The loop's wheel: ``len()`` is the number of pending timers, and
        ``stats()`` its counters."""
        return self._wheel

    def _bind_timers(self) -> None:
        """Outside debug mode, while the loop is open, call_later and
        call_at are the C ones (``_core._LoopTimers`` with uvloop's clock and
        _arm: the common call -- a float or int, a callable, at most
        context= -- scheduled and compared with the armed deadline in C;
        everything else handed to the Python methods below, so every error
        is theirs), set on the instance; in debug mode and once closed, the
        Python methods.  Only for a class that keeps this class's
        call_later, call_at and _arm (a subclass's own must not be
        shadowed); a method someone set on the instance is left alone."""
        timers = self.__dict__.get("_timers")
        if timers is None:  # uvloop's __init__ calls set_debug before ours ends
            return
        cls = type(self)
        plain = (
            cls.call_later is Loop.call_later
            and cls.call_at is Loop.call_at
            and cls._arm is Loop._arm
        )
        ok = plain and not self._pw_debug and not self.is_closed()
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
        if delay is None:
            raise TypeError("delay must not be None")
        # The hot path is loop.c's; this one serves debug mode, a closed
        # loop and unusual arguments, through call_at as asyncio's does.
        timer = self.call_at(_uv_time(self) + delay, callback, *args, context=context)
        if self._pw_debug and timer._source_traceback:
            del timer._source_traceback[-1]
        return timer

    def call_at(self, when, callback, *args, context=None):
        if when is None:
            raise TypeError("when cannot be None")
        if self._pw_debug:
            return self._call_at_debug(when, callback, args, context)
        try:
            timer = self._wheel.call_at(when, callback, *args, context=context)
        except OverflowError:
            timer = self._call_never(when, callback, args, context)
            when = timer.when()  # inf: nothing to arm; -inf: due now
        except RuntimeError:
            if self.is_closed():  # the wheel closes with the loop: uvloop's words
                raise RuntimeError("Event loop is closed") from None
            raise
        if when < self._timers.arm_below:
            self._arm(when)
        return timer

    def _call_at_debug(self, when, callback, args, context):
        """Debug mode: uvloop's thread check, asyncio's callback checks, and
        an asyncio.TimerHandle run from the wheel by WheelEventLoop's code."""
        if self.is_closed():
            raise RuntimeError("Event loop is closed")
        if self.is_running() and _events._get_running_loop() is not self:
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other than the current one"
            )
        if _coroutines.iscoroutine(callback) or _iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with call_at()")
        if not callable(callback):
            raise TypeError(f"a callable object was expected by call_at(), got {callback!r}")
        timer = _pwa._debug_timer(self, when, callback, args, context)
        when = timer._timer.when()
        if when < self._timers.arm_below:
            self._arm(when)
        return timer

    def _call_never(self, when, callback, args, context):
        """A finite deadline beyond the wheel's clock (|t| >= 2**63 ns, about
        292 years): it never runs (far in the past: it runs now), as on
        WheelEventLoop."""
        when = _inf if when > 0 else -_inf
        return self._wheel.call_at(when, callback, *args, context=context)

    def _arm(self, when: float) -> None:
        """Make sure the loop wakes for a deadline `when`, earlier than the
        one armed: queue a run if it is due already, else (re)start the libuv
        timer at the first millisecond at or after it."""
        now = _uv_time(self)  # brings libuv's clock up to date, as uv_timer_start reads it
        if when <= now:
            self._queue_run()
            return
        # now is libuv's whole millisecond; uvloop turns this delay back into
        # the same count (round(delay * 1000)).  A count one short (float
        # noise) only wakes the loop early for nothing: _run_wheel runs what
        # is due by loop.time() and re-arms.
        ms = _ceil((when - now) * 1000.0)
        fires = now + ms / 1000.0
        if fires >= self._uv_fires:  # that millisecond or an earlier one is armed
            return
        old = self._uv_timer
        if old is not None:
            old.cancel()
        self._uv_timer = _uv_call_later(self, ms / 1000.0, self._on_uv_timer)
        self._uv_fires = fires
        if not self._run_queued:
            self._timers.arm_below = fires

    def _queue_run(self) -> None:
        if not self._run_queued:
            self._run_queued = True
            self._timers.arm_below = -_inf
            _uv_call_soon(self, self._run_wheel)

    def _on_uv_timer(self) -> None:
        """The libuv timer fired (in libuv's timer phase, ahead of the ready
        callbacks): the due timers run after those, from a ready callback."""
        self._uv_timer = None
        self._uv_fires = _inf
        self._queue_run()

    def _run_wheel(self) -> None:
        """Runs, in exact-deadline order, every timer with when() <= time();
        what they schedule, even for a time already past, waits for the next
        loop iteration.  Then arms for the next deadline."""
        self._run_queued = False
        self._timers.arm_below = self._uv_fires
        wheel = self._wheel
        now = _uv_time(self)
        try:
            wheel.run_due(now if now > wheel.time() else wheel.time())
        finally:
            nxt = wheel.next_when()
            if nxt is not None and nxt < self._timers.arm_below and not self.is_closed():
                self._arm(nxt)

    def set_debug(self, enabled: bool) -> None:
        self._pw_debug = bool(enabled)
        super().set_debug(enabled)
        self._bind_timers()

    def _timer_handle_cancelled(self, handle) -> None:
        """asyncio.TimerHandle.cancel() calls it (debug mode's handles)."""

    _on_timer_error = _pwa.WheelEventLoop._on_timer_error
    _run_timed = _pwa.WheelEventLoop._run_timed

    def close(self) -> None:
        super().close()
        self._bind_timers()  # closed: the Python methods say so, as uvloop
        self._wheel.close()


def new_event_loop() -> Loop:
    """A new ``pywheel.uvloop.Loop``."""
    return Loop()


def run(main, *, loop_factory=new_event_loop, debug: bool | None = None, **run_kwargs):
    """``uvloop.run(main)`` on a ``pywheel.uvloop.Loop``."""
    return _uvloop.run(main, loop_factory=loop_factory, debug=debug, **run_kwargs)


# ---- install() and EventLoopPolicy, where uvloop still has them ----------------
#
# uvloop makes both on first access (its module __getattr__) and drops them
# on 3.16; so do we, through pywheel.asyncio's lazy policy (no deprecated
# name touched at import).


def _make_policy() -> type:
    _pwa._policy_base()  # AttributeError where asyncio has no policies
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        base = _uvloop.EventLoopPolicy

    class EventLoopPolicy(base):  # type: ignore[misc, valid-type]
        """uvloop's policy, making ``pywheel.uvloop.Loop``s.  Deprecated with
        asyncio's policy system: use ``pywheel.uvloop.run()``."""

        def _loop_factory(self) -> Loop:
            return new_event_loop()

    EventLoopPolicy.__module__ = __name__
    EventLoopPolicy.__qualname__ = "EventLoopPolicy"
    return EventLoopPolicy


def _install() -> None:
    """uvloop.install(): make the policy pywheel.uvloop's (deprecated)."""
    with warnings.catch_warnings():  # install() itself said it is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = _lazy("EventLoopPolicy")
        asyncio.set_event_loop_policy(policy())


def _lazy(name: str, stacklevel: int = 3) -> Any:
    return _pwa._lazy_policy(
        __name__, name, _make_policy, "pywheel.uvloop.run()", stacklevel=stacklevel
    )


def __getattr__(name: str) -> Any:
    if name == "EventLoopPolicy":
        return _lazy(name)
    if name == "install" and sys.version_info < (3, 16):

        def install() -> None:
            """``uvloop.install()``: deprecated, use ``pywheel.uvloop.run()``."""
            if sys.version_info >= (3, 12):
                warnings.warn(
                    "pywheel.uvloop.install() is deprecated in favor of pywheel.uvloop.run(), "
                    "as uvloop.install() is since Python 3.12",
                    DeprecationWarning,
                    stacklevel=2,
                )
            _install()

        return install
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
