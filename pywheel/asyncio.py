"""asyncio with its timers on a timing wheel.

Two ways in:

* ``WheelEventLoop`` (and ``new_event_loop()`` for ``loop_factory=``, ``run()``;
  ``EventLoopPolicy`` where asyncio still has policies, made on first use):
  the standard selector loop with every ``call_later``/``call_at`` on a wheel
  the loop drives itself, so ``asyncio.sleep``, ``wait_for``,
  ``asyncio.timeout`` and everything else built on timers use it unchanged.
  No extra thread: the loop advances the wheel each time it wakes and tells
  its selector how long it may sleep, and timer callbacks run on the loop.

* ``sleep()``, ``timeout()``, ``timeout_at()`` for any running loop (stock
  asyncio, uvloop).  On a ``WheelEventLoop`` they use its wheel; elsewhere a
  shared threaded ``pywheel.Wheel`` whose expiries reach each loop through one
  ``call_soon_threadsafe`` per batch, not one per timer.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import enum
import math
import threading
import warnings
import weakref
from asyncio import base_events as _base_events
from asyncio import events as _events
from asyncio import exceptions as _exceptions
from asyncio import tasks as _tasks
from collections.abc import Coroutine
from typing import Any, TypeVar

from . import _core
from ._tracebacks import hide as __tracebackhide__  # noqa: F401  (pytest: see there)

# EventLoopPolicy is not in __all__: it exists only where asyncio still has
# policies, and a star import must not touch deprecated names.
__all__ = [
    "Timeout",
    "WheelEventLoop",
    "new_event_loop",
    "run",
    "sleep",
    "timeout",
    "timeout_at",
]

# As asyncio does: never ask a selector to sleep longer than a day.
_MAX_SELECT_TIMEOUT = 24 * 3600
_nextafter = math.nextafter


class WheelEventLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose timers live on a pywheel wheel.

    ``call_later``/``call_at`` return ``pywheel.TimerHandle`` objects, which
    have the public surface of ``asyncio.TimerHandle`` (``when()``,
    ``cancel()``, ``cancelled()``, ``get_context()``, ``_when``) but are C
    objects that the garbage collector never has to walk (as uvloop's handles
    are not asyncio's class either); in debug mode they are
    ``asyncio.TimerHandle`` objects, with asyncio's source tracebacks.  A
    timer runs when ``time()`` reaches its exact deadline (within the
    clock's resolution, as on the stock loop); the wheel's ``tick`` is its
    bucket size, not a delay.  Outside debug mode ``call_later``,
    ``call_at`` and ``call_soon`` are C methods set on the instance (see
    ``_bind_timers``); ``call_soon`` returns an ``asyncio.Handle``, as the
    stock loop's does.
    """

    # Until BaseEventLoop.__init__ runs: a loop whose arguments were refused
    # is "closed" for __del__ (no "unclosed event loop" warning for it).
    _closed = True

    def __init__(self, selector=None, *, tick: float = 0.001) -> None:
        # The wheel first: it is what checks tick (and, on virtual time, the
        # start), so a refused argument raises before a selector or a
        # self-pipe exists that __del__ would have to clean up.
        self._wheel = _core.ManualWheel(tick, start=max(0.0, self.time()))
        # Its handles keep asyncio.TimerHandle's contract: cancel() returns
        # None, cancelled() turns True on any cancel(), == and hash as asyncio.
        self._wheel._stock_handles()
        self._c_timers = _c_timers(self)
        self._c_soon = _c_soon(self)
        try:
            super().__init__(selector)
        except BaseException:
            self._wheel.close()
            raise
        self._bind_timers()
        # Not a bound method: loop -> wheel -> handler -> loop would leave
        # every loop to the garbage collector.
        self._wheel.set_exception_handler(_TimerErrorForwarder(self))

    @property
    def wheel(self) -> _core.ManualWheel:
        """The loop's wheel: ``len()`` is the number of pending timers, and
        ``stats()`` its counters."""
        return self._wheel

    def set_debug(self, enabled: bool) -> None:
        super().set_debug(enabled)
        self._bind_timers()

    # The C methods do not read the loop per call: what they may take on
    # themselves is two flags, kept here on every write of what they depend
    # on.  (A write straight into __dict__ bypasses this, as it bypasses any
    # descriptor.)  A subclass without the C methods does without the hook:
    # see __init_subclass__.
    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _FAST_STATE:
            self._sync_timers()

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        if name in _FAST_STATE:
            self._sync_timers()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not _plain_class(cls) and not _plain_soon_class(cls):
            if "__setattr__" not in cls.__dict__:
                cls.__setattr__ = object.__setattr__  # type: ignore[method-assign,assignment]
            if "__delattr__" not in cls.__dict__:
                cls.__delattr__ = object.__delattr__  # type: ignore[method-assign,assignment]

    def _sync_timers(self) -> None:
        attrs = self.__dict__
        ok = attrs.get("_closed") is False and attrs.get("_debug") is False
        fast = attrs.get("_c_timers")
        if fast is not None:
            later_ok = ok and attrs.get("call_at") is fast[1] and "time" not in attrs
            fast[1].__self__._set_plain(ok, later_ok)
        soon = attrs.get("_c_soon")
        if soon is not None:
            # The C call_soon does what BaseEventLoop's call_soon, _check_closed,
            # _call_soon and get_debug do: none of them replaced on the
            # instance, and the queue a deque as BaseEventLoop makes it.
            ready = attrs.get("_ready")
            soon_ok = (
                ok
                and attrs.get("call_soon") is soon
                and type(ready) is collections.deque
                and _SOON_METHODS.isdisjoint(attrs)
            )
            soon.__self__._set_plain(soon_ok, ready)

    def _bind_timers(self) -> None:
        """Outside debug mode, call_later and call_at are the C ones
        (``_core._LoopTimers``: the same checks, about eight times cheaper:
        115 ns to 880 ns a call_later + cancel), set on the instance; in
        debug mode, the Python methods below, which keep asyncio's debug
        checks (thread, coroutine functions) and its source tracebacks.  So
        is call_soon (``_core._LoopSoon``: BaseEventLoop.call_soon's work,
        an ``asyncio.Handle`` queued on ``_ready``, for about a third of its
        cost), where the class keeps BaseEventLoop's.  A method replaced on
        the instance by someone else is left alone."""
        if "_c_soon" not in self.__dict__:  # until __init__ made them
            return
        fast = self.__dict__.get("_c_timers")
        attrs = self.__dict__
        methods = list(zip(("call_later", "call_at"), fast or (), strict=False))
        soon = attrs.get("_c_soon")
        if soon is not None:
            methods.append(("call_soon", soon))
        for name, method in methods:
            current = attrs.get(name)
            if self._debug:
                if current is method:
                    del attrs[name]
            elif current is None:
                attrs[name] = method
        self._sync_timers()

    def call_later(self, delay, callback, *args, context=None):
        """asyncio's ``call_later``, on the loop's wheel: returns a
        ``pywheel.TimerHandle`` (in debug mode an ``asyncio.TimerHandle``)."""
        if delay is None:
            raise TypeError("delay must not be None")
        timer = self.call_at(self.time() + delay, callback, *args, context=context)
        if self._debug and timer._source_traceback:
            del timer._source_traceback[-1]
        return timer

    def call_at(self, when, callback, *args, context=None):
        """asyncio's ``call_at``, on the loop's wheel: returns a
        ``pywheel.TimerHandle`` (in debug mode an ``asyncio.TimerHandle``)."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
            return _debug_timer(self, when, callback, args, context)
        try:
            return self._wheel.call_at(when, callback, *args, context=context)
        except OverflowError:
            return self._call_never(when, callback, args, context)

    def _call_never(self, when, callback, args, context):
        """A finite deadline beyond the wheel's clock (|t| >= 2**63 ns, about
        292 years): asyncio would just wait, so it never runs (or, far in
        the past, runs in the next batch); its when() says inf (-inf)."""
        when = math.inf if when > 0 else -math.inf
        return self._wheel.call_at(when, callback, *args, context=context)

    def _on_timer_error(self, context: dict) -> None:
        handle = context.get("handle")
        self.call_exception_handler(
            {
                "message": f"Exception in callback {handle!r}",
                "exception": context.get("exception"),
                "handle": handle,
            }
        )

    def _run_once(self) -> None:
        """One iteration, the steps of ``BaseEventLoop._run_once`` with the
        wheel in place of the heap: wait for I/O until the next deadline; set
        aside the timers due before ``time() + clock_resolution``; run the
        callbacks that were ready, then those timers.  What any of them
        schedules waits for the next iteration, so neither a ``call_soon`` nor
        a zero-delay timer loop can starve I/O, and a timer that fell due
        never runs ahead of a callback that was ready before it."""
        wheel = self._wheel
        ready = self._ready
        if ready or self._stopping:
            timeout = 0
        else:
            nxt = wheel.next_when()
            if nxt is None:
                timeout = None
            else:
                timeout = min(max(0.0, nxt - self.time()), _MAX_SELECT_TIMEOUT)
        event_list = self._selector.select(timeout)
        self._process_events(event_list)
        event_list = None  # as asyncio: no cycles through the events
        # As asyncio: due is every timer with when() < time() + resolution;
        # collect_due(x) takes when() <= x, so x is the float just below.
        # Where adding the resolution changes nothing (times past 2**24 s),
        # everything with when() <= time() is due, or a virtual clock that
        # jumped onto a deadline would never run it.  _collect_for_loop also
        # takes every timer whose deadline was a float <= time(), for a
        # time() frozen between two nanoseconds (see manual.c).
        now = self.time()
        end = now + self._clock_resolution
        end = _nextafter(end, -math.inf) if end > now else now
        wheel._collect_for_loop(end, now)
        ntodo = len(ready)
        if self._debug:
            for _ in range(ntodo):
                self._run_timed(ready.popleft())
        else:
            for _ in range(ntodo):
                handle = ready.popleft()
                if handle._cancelled:
                    continue
                handle._run()
        # As asyncio: the last handle must not stay referenced from this
        # frame, or an exception it stored sits in a cycle through it.
        handle = None
        wheel.run_collected()

    def _run_timed(self, handle) -> None:
        """Debug mode: a ready callback, or a timer (an asyncio.TimerHandle
        run from the wheel), run and timed as the stock loop does."""
        try:
            if handle._cancelled:
                return
            self._current_handle = handle
            t0 = self.time()
            handle._run()
            dt = self.time() - t0
            if dt >= self.slow_callback_duration:
                _warn_slow(handle, dt)
        finally:
            self._current_handle = None
            handle = None  # see _run_once

    def close(self) -> None:
        super().close()
        self._wheel.close()


# The methods the C call_soon does the work of, as BaseEventLoop defines them.
_SOON_METHODS = frozenset({"_call_soon", "_check_closed", "get_debug"})
# The attributes the C methods' flags depend on (WheelEventLoop._sync_timers).
_FAST_STATE = frozenset(
    {"_closed", "_debug", "call_at", "call_later", "time", "call_soon", "_ready"} | _SOON_METHODS
)


def _plain_class(cls: type) -> bool:
    """Whether the class keeps WheelEventLoop's call_later and call_at and
    BaseEventLoop's time(): the C methods read time.monotonic() themselves,
    and would bypass a subclass's own."""
    return (
        cls.call_later is WheelEventLoop.call_later
        and cls.call_at is WheelEventLoop.call_at
        and cls.time is _base_events.BaseEventLoop.time
    )


def _c_timers(loop: WheelEventLoop) -> tuple | None:
    """The C call_later and call_at for this loop, or None for a class that
    is not plain (see _plain_class)."""
    if not _plain_class(type(loop)):
        return None
    timers = _core._LoopTimers(loop._wheel, loop, WheelEventLoop.call_later, WheelEventLoop.call_at)
    return timers.call_later, timers.call_at


def _plain_soon_class(cls: type) -> bool:
    """Whether the class keeps BaseEventLoop's call_soon and what it calls
    (_check_closed, _call_soon, get_debug, which Handle() calls): the C
    call_soon does their work and would bypass a subclass's own."""
    base = _base_events.BaseEventLoop
    return getattr(cls, "call_soon") is base.call_soon and all(  # noqa: B009 - any class
        getattr(cls, name) is getattr(base, name) for name in _SOON_METHODS
    )


def _c_soon(loop: WheelEventLoop):
    """The C call_soon for this loop (``_core._LoopSoon``), or None for a class
    that is not plain (see _plain_soon_class) or an asyncio whose Handle has
    a layout the C code does not know (then it never will: checked once)."""
    if not _soon_layout_ok[0] or not _plain_soon_class(type(loop)):
        return None
    try:
        soon = _core._LoopSoon(loop, _base_events.BaseEventLoop.call_soon, _events.Handle)
    except TypeError:
        _soon_layout_ok[0] = False
        return None
    return soon.call_soon


_soon_layout_ok = [True]


def _warn_slow(handle, dt: float) -> None:
    """Debug mode's warning, on the logger asyncio's own loop uses."""
    _base_events.logger.warning(
        "Executing %s took %.3f seconds", _base_events._format_handle(handle), dt
    )


class _TimerErrorForwarder:
    """The wheel's exception handler: reports to the loop, which it holds
    weakly."""

    __slots__ = ("_loop",)

    def __init__(self, loop: WheelEventLoop) -> None:
        self._loop = weakref.ref(loop)

    def __call__(self, wheel, context: dict) -> None:
        loop = self._loop()
        if loop is None:
            wheel.default_exception_handler(context)
        else:
            loop._on_timer_error(context)


class _DebugTimerHandle(asyncio.TimerHandle):
    """Debug mode's timer: an asyncio.TimerHandle (source traceback, repr,
    error reports as asyncio's) that runs from the loop's wheel."""

    __slots__ = ("_timer",)

    def cancel(self) -> None:
        if not self._cancelled:
            self._timer.cancel()
        super().cancel()


def _debug_timer(loop, when, callback, args, context) -> _DebugTimerHandle:
    """Debug mode's timer on a loop that drives a wheel (WheelEventLoop,
    pywheel.uvloop.Loop: ``_wheel``, ``_run_timed``, ``_call_never``), made
    by the loop's call_at after its checks; its source traceback ends at the
    caller of call_at, as asyncio's does."""
    timer = _DebugTimerHandle(when, callback, args, loop, context)
    if timer._source_traceback:
        del timer._source_traceback[-2:]  # this function and call_at
    ctx = contextvars.Context()
    try:
        timer._timer = loop._wheel.call_at(when, loop._run_timed, timer, context=ctx)
    except OverflowError:
        timer._timer = loop._call_never(when, loop._run_timed, (timer,), ctx)
    return timer


def new_event_loop() -> WheelEventLoop:
    """A new ``WheelEventLoop``: ``asyncio.Runner(loop_factory=new_event_loop)``."""
    return WheelEventLoop()


def _make_policy() -> type:
    class EventLoopPolicy(_policy_base()):  # type: ignore[misc]
        """Makes ``asyncio.new_event_loop()`` (and so ``asyncio.run``) create
        ``WheelEventLoop``s: ``asyncio.set_event_loop_policy(EventLoopPolicy())``.
        Deprecated with asyncio's policy system (3.14; gone in 3.16): pass
        ``loop_factory=pywheel.asyncio.new_event_loop`` instead."""

        def new_event_loop(self) -> WheelEventLoop:
            return WheelEventLoop()

    EventLoopPolicy.__module__ = __name__
    EventLoopPolicy.__qualname__ = "EventLoopPolicy"
    return EventLoopPolicy


# ---- the policy, only where asyncio still has a policy system ------------------
#
# asyncio 3.14 deprecates its policy system (DefaultEventLoopPolicy, get/
# set_event_loop_policy, ...) and 3.16 removes it.  A class statement that
# subclasses DefaultEventLoopPolicy at import time would warn on every
# `import pywheel.asyncio` there (an error for suites that turn warnings into
# errors) and fail outright on 3.16.  So the policy class is made on first
# access, through the module's __getattr__: importing pywheel never touches a
# deprecated name, and only a program that asks for the policy hears about
# the deprecation, pointed at its own line.

_policies: dict[str, type] = {}
# Whether this asyncio deprecates its policies: seen, not assumed from the
# version number (3.14 does), when DefaultEventLoopPolicy is first read.
_policy_deprecated = [False]


def _policy_base() -> type:
    """asyncio's DefaultEventLoopPolicy, read without asyncio's own warning
    (the caller gives one that points at the user's code)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        base = getattr(asyncio, "DefaultEventLoopPolicy", None)
    if any(issubclass(w.category, DeprecationWarning) for w in caught):
        _policy_deprecated[0] = True
    if base is None:
        raise AttributeError(
            "asyncio has no event loop policies on this Python (removed in 3.16): use "
            "asyncio.run(main(), loop_factory=...) or asyncio.Runner(loop_factory=...)"
        )
    return base


def _lazy_policy(module: str, name: str, make, replacement: str, stacklevel: int = 3) -> type:
    """The policy class ``module.name``, made by ``make()`` on first use; on
    Pythons that deprecate asyncio's policies, a DeprecationWarning at the
    caller's line naming ``replacement``.  For the modules' ``__getattr__``."""
    key = f"{module}.{name}"
    cls = _policies.get(key)
    if cls is None:
        try:
            cls = _policies[key] = make()
        except AttributeError as exc:
            raise AttributeError(f"{key} is not available: {exc}") from None
    if _policy_deprecated[0]:
        warnings.warn(
            f"{key} builds on asyncio's event loop policies, deprecated since Python "
            f"3.14 and removed in 3.16; use {replacement}",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
    return cls


def __getattr__(name: str) -> Any:
    if name == "EventLoopPolicy":
        return _lazy_policy(
            __name__,
            name,
            _make_policy,
            "asyncio.run(main(), loop_factory=pywheel.asyncio.new_event_loop) or "
            "asyncio.Runner(loop_factory=pywheel.asyncio.new_event_loop)",
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_T = TypeVar("_T")


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """``asyncio.run(main)`` on a ``WheelEventLoop``."""
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


# ---- the bridge: a shared threaded wheel serving loops without their own ----

# The wheel thread only queues an expiry; the loop runs the callback.  This
# empty context spares the wheel a copy of the scheduling task's context.  It
# is entered only on the wheel's one thread: a context cannot be entered
# twice at once, so whatever runs on a loop gets a fresh one.
_NO_CONTEXT = contextvars.Context()


class _LoopQueue:
    """Expiries waiting to reach one loop, and whether a flush is on its way.

    The wheel thread appends and, if no flush is scheduled, schedules one with
    call_soon_threadsafe; the flush clears the flag before draining, so an
    expiry appended during a drain is either drained or triggers a new flush.
    deque.append/popleft are atomic, so no lock is needed.  The loop is held
    weakly: the registry must not keep every loop that ever used a helper."""

    __slots__ = ("loop", "items", "scheduled", "__weakref__")

    def __init__(self, loop) -> None:
        self.loop = weakref.ref(loop)
        self.items: collections.deque = collections.deque()
        self.scheduled = False

    def push(self, timer: _BridgeTimer) -> None:  # on the wheel thread
        self.items.append(timer)
        if not self.scheduled:
            loop = self.loop()
            if loop is None:  # gone: nobody to run them
                self.items.clear()
                return
            self.scheduled = True
            try:
                loop.call_soon_threadsafe(self.flush)
            except RuntimeError:  # the loop closed meanwhile
                self.items.clear()

    def flush(self) -> None:  # on the loop
        """Hands each expiry to the loop as one of its own timers, due now.

        The loop then runs it as it runs asyncio's own timeouts: after the
        callbacks that were ready when its iteration began (a result that
        arrived before the expiry wins), reported as any timer callback is."""
        self.scheduled = False
        loop = self.loop()
        items = self.items
        while items:
            timer = items.popleft()
            if timer._cancelled:  # cancelled on the loop after it fired
                continue
            timer._handle = loop.call_at(timer._when, timer._run, context=contextvars.Context())
        timer = None


class _BridgeTimer:
    """What sleep() and Timeout hold on a loop without a wheel: first a
    timer on the shared wheel, then, once it fired, one on the loop;
    cancel() works at either stage."""

    __slots__ = ("_callback", "_args", "_cancelled", "_fired", "_handle", "_when")

    def __init__(self, when: float, callback, args) -> None:
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._fired = False
        self._handle = None
        self._when = when

    def when(self) -> float:
        return self._when

    def cancel(self) -> bool:
        if self._cancelled or self._fired:
            return False
        self._cancelled = True
        self._handle.cancel()
        self._callback = self._args = None
        return True

    def cancelled(self) -> bool:
        return self._cancelled

    def _run(self) -> None:  # on the loop, from its own timer
        self._fired = True
        callback, args = self._callback, self._args
        self._callback = self._args = None
        callback(*args)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "done" if self._fired else "pending"
        return f"<pywheel.asyncio bridge timer {state} when={self._when} cb={self._callback!r}>"


class _Bridge:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wheel: _core.Wheel | None = None
        self._queues: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def wheel(self) -> _core.Wheel:
        w = self._wheel
        if w is None or w.closed:  # first use, or a forked child's copy
            with self._lock:
                if self._wheel is None or self._wheel.closed:
                    self._wheel = _core.Wheel()
                w = self._wheel
        return w

    def call_at(self, loop, when: float, callback, *args) -> _BridgeTimer:
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues.setdefault(loop, _LoopQueue(loop))
        timer = _BridgeTimer(when, callback, args)
        try:
            wheel = self.wheel()
        except RuntimeError:
            # pywheel's exit hook has run (an atexit hook registered before
            # pywheel was imported runs after it) and refuses new wheel
            # threads: nothing would stop one before finalization.  The
            # loop's own timer does what the wheel's would hand it to.
            timer._handle = loop.call_at(when, timer._run, context=contextvars.Context())
            return timer
        # The loop's clock and the wheel's are both time.monotonic()'s, but a
        # loop may cache its time (uvloop does): carry the delay over.
        delay = when - loop.time()
        try:
            timer._handle = wheel.call_later(delay, queue.push, timer, context=_NO_CONTEXT)
        except OverflowError:  # beyond the wheel's clock: asyncio would just wait
            timer._handle = wheel.call_later(math.inf, queue.push, timer, context=_NO_CONTEXT)
        return timer


_bridge = _Bridge()


def _call_at(loop, when: float, callback, *args):
    if isinstance(loop, WheelEventLoop) or when != when:
        # NaN: the loop's own verdict (the stock loop takes it and asyncio's
        # helpers pass it on; WheelEventLoop refuses it).
        return loop.call_at(when, callback, *args)
    return _bridge.call_at(loop, when, callback, *args)


# ---- sleep, timeout, timeout_at ---------------------------------------------


def _set_result_unless_cancelled(fut: asyncio.Future, result: Any) -> None:
    if not fut.cancelled():
        fut.set_result(result)


async def sleep(delay: float, result: Any = None) -> Any:
    """``asyncio.sleep``, with its timer on a wheel."""
    loop = _events.get_running_loop()
    if not delay > 0 or isinstance(loop, WheelEventLoop):
        # Zero, negative, NaN (as asyncio: 3.13 refuses it, older versions
        # hand it to the loop), or a loop with its own wheel.
        return await asyncio.sleep(delay, result)
    fut = loop.create_future()
    timer = _bridge.call_at(loop, loop.time() + delay, _set_result_unless_cancelled, fut, result)
    try:
        return await fut
    finally:
        timer.cancel()


class _State(enum.Enum):
    CREATED = "created"
    ENTERED = "active"
    EXPIRING = "expiring"
    EXPIRED = "expired"
    EXITED = "finished"


class Timeout:
    """``asyncio.Timeout``'s surface and semantics, with its timer on a wheel.

    Use ``timeout()`` or ``timeout_at()``.  The block's task is cancelled at
    the deadline; leaving the block turns that cancellation, and only that
    one, into ``TimeoutError``.  ``when()``, ``reschedule(when)`` and
    ``expired()`` behave as asyncio's."""

    __slots__ = ("_state", "_handle", "_task", "_when", "_cancelling")

    def __init__(self, when: float | None) -> None:
        self._state = _State.CREATED
        self._handle = None
        self._task = None
        self._when = when

    def when(self) -> float | None:
        """The current deadline, in ``loop.time()`` seconds, or None."""
        return self._when

    def reschedule(self, when: float | None) -> None:
        """Move the deadline (None: no deadline).  Only inside the block."""
        if self._state is not _State.ENTERED:
            if self._state is _State.CREATED:
                raise RuntimeError("Timeout has not been entered")
            raise RuntimeError(f"Cannot change state of {self._state.value} Timeout")
        self._when = when
        handle, self._handle = self._handle, None
        if when is not None and isinstance(handle, _core.TimerHandle):
            # On a WheelEventLoop the timer moves in place: O(1), no new
            # handle (the idle timeout pushed back on every read).  False if
            # it already started, or the deadline is out of the wheel's range.
            try:
                moved = when > _events.get_running_loop().time() and handle.reschedule(when)
            except OverflowError:
                moved = False
            if moved:
                self._handle = handle
                return
        if handle is not None:
            handle.cancel()
        if when is not None:
            loop = _events.get_running_loop()
            if when <= loop.time():
                self._handle = loop.call_soon(self._on_timeout)
            else:
                self._handle = _call_at(loop, when, self._on_timeout)

    def expired(self) -> bool:
        """True once the deadline passed while the block ran."""
        return self._state in (_State.EXPIRING, _State.EXPIRED)

    def __repr__(self) -> str:
        extra = ""
        if self._state is _State.ENTERED:
            when = None if self._when is None else round(self._when, 3)
            extra = f" when={when}"
        return f"<Timeout [{self._state.value}]{extra}>"

    async def __aenter__(self) -> Timeout:
        if self._state is not _State.CREATED:
            raise RuntimeError("Timeout has already been entered")
        task = _tasks.current_task()
        if task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self._state = _State.ENTERED
        self._task = task
        self._cancelling = task.cancelling()
        self.reschedule(self._when)
        return self

    async def __aexit__(self, exc_type, exc_val, exc_tb) -> None:
        assert self._state in (_State.ENTERED, _State.EXPIRING)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._state is _State.EXPIRING:
            self._state = _State.EXPIRED
            # Ours is the only cancellation pending: it becomes TimeoutError.
            # Any other (an outer timeout, task.cancel()) passes through.
            if self._task.uncancel() <= self._cancelling and exc_type is _exceptions.CancelledError:
                raise TimeoutError from exc_val
        elif self._state is _State.ENTERED:
            self._state = _State.EXITED
        return None

    def _on_timeout(self) -> None:
        assert self._state is _State.ENTERED
        self._task.cancel()
        self._state = _State.EXPIRING
        self._handle = None


def timeout(delay: float | None) -> Timeout:
    """``async with timeout(10):`` cancels the block after 10 seconds and
    raises ``TimeoutError``; None means no deadline."""
    loop = _events.get_running_loop()
    return Timeout(None if delay is None else loop.time() + delay)


def timeout_at(when: float | None) -> Timeout:
    """Like ``timeout()``, with an absolute deadline in ``loop.time()`` seconds."""
    return Timeout(when)
