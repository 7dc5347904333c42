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
``WheelEventLoop``.

A timer whose deadline ``loop.time()`` has reached when it is scheduled
(``call_later(0)``, a negative delay, a past ``call_at``) is what uvloop makes
a ``call_soon``: its place in the order is where it was scheduled among the
ready callbacks.  So it is a "soon" timer of the wheel (``_call_soon_at``:
pending, cancellable, counted, but never collected by ``run_due``), and one
ready callback is queued for it alone through uvloop's ``call_soon``
(``wheel._run_soon(handle)``), which runs it there if it is still pending.

The clock is uvloop's: ``loop.time()`` is libuv's, in whole milliseconds,
unchanged.  A timer runs once ``loop.time() >= when()``, never before (uvloop
itself rounds a delay to the *nearest* millisecond, so it can run up to half
a millisecond before the deadline asked for); ``when()`` is the deadline
asked for, exactly, as on asyncio (uvloop's reads its rounded millisecond).

Needs uvloop: ``pip install 'pywheel[uvloop]'``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import sys
import time as _time
import warnings
from asyncio import coroutines as _coroutines
from asyncio import events as _events
from asyncio import format_helpers as _format_helpers
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

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
_sys_getframe = sys._getframe
# uvloop's own methods, reached past our overrides.  (uvloop's call_at calls
# self.call_later, which would be ours: the libuv timer is armed through
# uvloop's call_later, by the class, never through self.)
_uv_call_later = _uvloop.Loop.call_later
_uv_call_soon = _uvloop.Loop.call_soon
_uv_time = _uvloop.Loop.time
# uvloop's slow_callback_duration, the C field its debug-mode checks read.
_uv_slow = _uvloop.Loop.slow_callback_duration
_monotonic = _time.monotonic  # the clock uvloop times callbacks with
_logger = logging.getLogger("asyncio")  # the logger uvloop warns on


# The check asyncio's own call_at makes in debug mode: from 3.14 its public
# asyncio.iscoroutinefunction warns (deprecated), and the loop uses the
# private twin, which 3.11-3.13 do not have.
_iscoroutinefunction = getattr(_coroutines, "_iscoroutinefunction", _coroutines.iscoroutinefunction)


class Loop(_uvloop.Loop):
    """A ``uvloop.Loop`` whose ``call_later``/``call_at`` go to a pywheel wheel.

    Their handles are ``pywheel.TimerHandle`` objects with the surface of
    asyncio's and uvloop's (``when()``, ``cancel()``, ``cancelled()``,
    ``get_context()``); in debug mode ``asyncio.TimerHandle`` objects, with
    asyncio's source tracebacks, that print as uvloop's handles and are
    timed and warned about as uvloop times its own.  ``wheel`` is the
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
            self._wheel, self, Loop.call_later, Loop.call_at, _uv_time, Loop._arm, _uv_call_soon
        )
        self._run_queued = False
        # The context uvloop runs the soon timers' ready callbacks in (their
        # timers run in their own): one, reused, as loop.c's (see there).
        self._soon_ctx = contextvars.Context()
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
        """uvloop's ``call_later``, on the loop's wheel: returns a
        ``pywheel.TimerHandle`` (in debug mode an ``asyncio.TimerHandle``)."""
        if delay is None:
            raise TypeError("delay must not be None")
        # The hot path is loop.c's; this one serves debug mode, a closed
        # loop and unusual arguments, through call_at as asyncio's does.
        when = _uv_time(self) + delay
        at = self.call_at
        if getattr(at, "__func__", None) is not Loop.call_at:  # another call_at: it decides
            return at(when, callback, *args, context=context)
        return self._call_at(when, callback, args, context, _sys_getframe(1))

    def call_at(self, when, callback, *args, context=None):
        """uvloop's ``call_at``, on the loop's wheel: returns a
        ``pywheel.TimerHandle`` (in debug mode an ``asyncio.TimerHandle``)."""
        return self._call_at(when, callback, args, context, _sys_getframe(1))

    def _call_at(self, when, callback, args, context, frame):
        """call_at; `frame` is the caller's (debug mode's source traceback)."""
        if when is None:
            raise TypeError("when cannot be None")
        if self._pw_debug:
            return self._call_at_debug(when, callback, args, context, frame)
        wheel = self._wheel
        soon = self._due(when)
        try:
            if soon:
                timer = wheel._call_soon_at(when, callback, *args, context=context)
            else:
                timer = wheel.call_at(when, callback, *args, context=context)
        except OverflowError:
            timer = self._call_never(when, callback, args, context, soon)
            when = timer.when()  # inf: nothing to arm; -inf: due now
        except RuntimeError:
            if self.is_closed():  # the wheel closes with the loop: uvloop's words
                raise RuntimeError("Event loop is closed") from None
            raise
        if soon:
            self._queue_soon(wheel._run_soon, timer)
        elif when < self._timers.arm_below:
            self._arm(when)
        return timer

    def _due(self, when) -> bool:
        """Whether a deadline is due already (loop.time() has reached it):
        uvloop makes such a timer a call_soon, and so a soon timer here.
        What does not compare with a float, or raises comparing (a Decimal
        NaN), is not: the wheel then refuses it with its own error."""
        try:
            return bool(when <= _uv_time(self))
        except Exception:
            return False

    def _queue_soon(self, run, timer) -> None:
        """Queues run(timer) on uvloop's ready queue, where uvloop's
        call_soon puts a callback; if that fails the timer, which would never
        run, is cancelled."""
        try:
            _uv_call_soon(self, run, timer, context=self._soon_ctx)
        except BaseException:
            timer.cancel()
            raise

    def _call_at_debug(self, when, callback, args, context, frame):
        """Debug mode: uvloop's thread check, asyncio's callback checks, and
        a handle with asyncio.TimerHandle's surface run from the wheel,
        timed and named as uvloop times and names its own (_run_timed)."""
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
        soon = self._due(when)
        timer = _DebugTimerHandle(when, callback, args, self, context)
        timer._soon = soon
        timer._uv_name = _callback_name(callback)
        timer._source_traceback = _format_helpers.extract_stack(frame)
        ctx = contextvars.Context()
        wheel = self._wheel
        try:
            if soon:
                timer._timer = wheel._call_soon_at(when, self._run_timed, timer, context=ctx)
            else:
                timer._timer = wheel.call_at(when, self._run_timed, timer, context=ctx)
        except OverflowError:
            timer._timer = self._call_never(when, self._run_timed, (timer,), ctx, soon)
        if soon:
            self._queue_soon(self._run_soon_debug, timer._timer)
        else:
            when = timer._timer.when()
            if when < self._timers.arm_below:
                self._arm(when)
        return timer

    def _call_never(self, when, callback, args, context, soon=False):
        """A finite deadline beyond the wheel's clock (|t| >= 2**63 ns, about
        292 years): it never runs (far in the past: it runs now, a soon
        timer), as on WheelEventLoop."""
        if soon:
            return self._wheel._call_soon_at(-_inf, callback, *args, context=context)
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
        if self._pw_debug:
            _hush(self)

    def _run_soon_debug(self, timer) -> None:
        """Debug mode's ready callback for one soon timer (see _run_wheel's
        end for why it is not wheel._run_soon itself)."""
        self._wheel._run_soon(timer)
        if self._pw_debug:  # (uvloop compares only in debug mode)
            _hush(self)

    def _run_timed(self, handle) -> None:
        """Debug mode: a timer (a _DebugTimerHandle run from the wheel) run
        and timed as uvloop times its own: time.monotonic(), a warning on
        the 'asyncio' logger when it took more than slow_callback_duration
        and did not raise, naming the handle as uvloop names it."""
        if handle._cancelled:
            return
        self._current_handle = handle
        try:
            t0 = _monotonic()
            handle._run()
            dt = _monotonic() - t0
        finally:
            self._current_handle = None
        if dt > self.slow_callback_duration:
            _logger.warning("Executing %s took %.3f seconds", handle._uv_format(), dt)

    def set_debug(self, enabled: bool) -> None:
        self._pw_debug = bool(enabled)
        super().set_debug(enabled)
        self._bind_timers()

    def _timer_handle_cancelled(self, handle) -> None:
        """asyncio.TimerHandle.cancel() calls it (debug mode's handles)."""

    _on_timer_error = _pwa.WheelEventLoop._on_timer_error

    def close(self) -> None:
        super().close()
        self._bind_timers()  # closed: the Python methods say so, as uvloop
        self._wheel.close()


def _callback_name(func) -> str:
    """How uvloop names a callback in a handle's repr (its qualified name)."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return name if isinstance(name, str) else repr(func)


class _DebugTimerHandle(asyncio.TimerHandle):
    """Debug mode's timer: asyncio.TimerHandle's surface and source
    traceback, run from the loop's wheel (``_timer``, the wheel's handle),
    with uvloop's repr: ``<TimerHandle cb created at file:line>``, or for a
    timer due when scheduled (``_soon``), which uvloop makes a call_soon,
    ``<Handle cb created at file:line>``; "cancelled" after the class as
    uvloop writes it (and, as uvloop, no callback name for a cancelled
    Handle, whose callback uvloop drops)."""

    __slots__ = ("_timer", "_soon", "_uv_name")

    def cancel(self) -> None:
        if not self._cancelled:
            self._timer.cancel()
        super().cancel()

    def __repr__(self) -> str:
        info = ["Handle" if self._soon else "TimerHandle"]
        if self._cancelled:
            info.append("cancelled")
        if not (self._soon and self._cancelled):
            info.append(self._uv_name)
        tb = self._source_traceback
        if tb:
            info.append(f"created at {tb[-1][0]}:{tb[-1][1]}")
        return "<" + " ".join(info) + ">"

    def _uv_format(self) -> str:
        """What uvloop's slow-callback warning names: the handle, or for a
        ready callback that is a task's method, the task."""
        task = getattr(self._callback, "__self__", None)
        if self._soon and isinstance(task, asyncio.Task):
            return repr(task)
        return repr(self)


class _Hush(float):
    """uvloop's slow_callback_duration for one comparison (debug mode).

    uvloop times every ready callback it runs and warns about one slower
    than the loop's slow_callback_duration, read from its C field after the
    callback returned (``delta > slow_callback_duration``).  The callbacks
    that run the wheel (_run_wheel, _run_soon_debug) are not the program's:
    the timers they run are timed and named one by one (_run_timed), as
    uvloop times its own timers, so uvloop's warning about the runner (it
    named ``Loop._run_wheel``, or a batch of quick timers) must not be
    given.  Nothing of ours runs between the runner's return and uvloop's
    comparison, so the runner's last act puts this float, of the same
    value, in the field: as a subclass of float its reflected ``__lt__`` is
    the one Python calls for ``delta > hush``; it answers "not slow" and
    puts the plain float back.  Anyone reading the attribute meanwhile
    reads the same number.  Rejected: timing the wheel outside a ready
    callback (uvloop times its timer callbacks the same way), and lowering
    the warning to the runner's own (it cannot say which timer was slow)."""

    __slots__ = ("_loop",)

    def __lt__(self, other):
        loop = self._loop
        if loop is not None:
            self._loop = None
            if _uv_slow.__get__(loop) is self:
                _uv_slow.__set__(loop, float(self))
        return False


def _hush(loop: Loop) -> None:
    current = _uv_slow.__get__(loop)
    if type(current) is float or type(current) is int:
        h = _Hush(current)
        h._loop = loop
        _uv_slow.__set__(loop, h)


def new_event_loop() -> Loop:
    """A new ``pywheel.uvloop.Loop``."""
    return Loop()


_T = TypeVar("_T")


def run(
    main: Coroutine[Any, Any, _T],
    *,
    loop_factory: Callable[[], _uvloop.Loop] | None = new_event_loop,
    debug: bool | None = None,
    **run_kwargs: Any,
) -> _T:
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
