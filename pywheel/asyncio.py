"""asyncio with its timers on a timing wheel.

Two ways in:

* ``WheelEventLoop`` (and ``new_event_loop()``, ``EventLoopPolicy``, ``run()``):
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
import threading
import weakref
from asyncio import base_events as _base_events
from asyncio import events as _events
from asyncio import exceptions as _exceptions
from asyncio import tasks as _tasks
from typing import Any

from . import _core

__all__ = [
    "EventLoopPolicy",
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


class WheelEventLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose timers live on a pywheel wheel.

    ``call_later``/``call_at`` return ``pywheel.TimerHandle`` objects, which
    have the public surface of ``asyncio.TimerHandle`` (``when()``,
    ``cancel()``, ``cancelled()``, ``get_context()``) but are C objects that
    the garbage collector never has to walk (as uvloop's handles are not
    asyncio's class either).  Timers become due at the first tick boundary
    at or after their deadline (``tick`` seconds, 1 ms by default: the
    resolution of epoll's timeout), never earlier.
    """

    def __init__(self, selector=None, *, tick: float = 0.001) -> None:
        super().__init__(selector)
        self._wheel = _core.ManualWheel(tick, start=max(0.0, self.time()))
        self._wheel.set_exception_handler(self._on_timer_error)

    @property
    def wheel(self) -> _core.ManualWheel:
        """The loop's wheel: ``len()`` is the number of pending timers, and
        ``stats()`` its counters."""
        return self._wheel

    def call_later(self, delay, callback, *args, context=None):
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self.time() + delay, callback, *args, context=context)

    def call_at(self, when, callback, *args, context=None):
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        return self._wheel.call_at(when, callback, *args, context=context)

    def _on_timer_error(self, wheel, context: dict) -> None:
        handle = context.get("handle")
        self.call_exception_handler(
            {
                "message": f"Exception in callback {handle!r}",
                "exception": context.get("exception"),
                "handle": handle,
            }
        )

    def _run_once(self) -> None:
        """One iteration: wait for I/O until the next timer is due, then run
        the ready callbacks and the due timers.

        The same steps as asyncio's loop, with the wheel in place of the
        heap; timers run (in deadline order) right after the I/O wait, and
        the callbacks and timers they schedule wait for the next iteration,
        as on the stock loop."""
        wheel = self._wheel
        if self._ready or self._stopping:
            timeout = 0.0
        else:
            nxt = wheel.next_deadline()
            if nxt is None:
                timeout = None
            else:
                timeout = min(max(0.0, nxt - self.time()), _MAX_SELECT_TIMEOUT)
        self._process_events(self._selector.select(timeout))
        ntodo = len(self._ready)
        now = self.time()
        # One batch: a timer scheduled by a timer callback waits for the next
        # iteration, so a zero-delay timer loop cannot starve I/O.
        wheel.run_due(now if now > wheel.time() else wheel.time())
        ready = self._ready
        debug = self._debug
        for _ in range(ntodo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            if debug:
                self._run_slow_checked(handle)
            else:
                handle._run()

    def _run_slow_checked(self, handle) -> None:
        """Debug mode: runs a ready callback and warns if it was slow, on the
        logger asyncio's own loop uses."""
        self._current_handle = handle
        try:
            t0 = self.time()
            handle._run()
            dt = self.time() - t0
            if dt >= self.slow_callback_duration:
                fmt = _base_events._format_handle(handle)
                _base_events.logger.warning("Executing %s took %.3f seconds", fmt, dt)
        finally:
            self._current_handle = None

    def close(self) -> None:
        super().close()
        self._wheel.close()


def new_event_loop() -> WheelEventLoop:
    """A new ``WheelEventLoop``: ``asyncio.Runner(loop_factory=new_event_loop)``."""
    return WheelEventLoop()


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """Makes ``asyncio.new_event_loop()`` (and so ``asyncio.run``) create
    ``WheelEventLoop``s: ``asyncio.set_event_loop_policy(EventLoopPolicy())``."""

    def new_event_loop(self) -> WheelEventLoop:
        return WheelEventLoop()


def run(main, *, debug: bool | None = None):
    """``asyncio.run(main)`` on a ``WheelEventLoop``."""
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


# ---- the bridge: a shared threaded wheel serving loops without their own ----

# Delivery runs the user's callback on the loop, in the loop's context; the
# wheel thread only queues it.  This empty context spares pywheel a copy of
# whatever context the scheduling task had.
_NO_CONTEXT = contextvars.Context()


class _LoopQueue:
    """Expiries waiting to run on one loop, and whether a flush is on its way.

    The wheel thread appends and, if no flush is scheduled, schedules one with
    call_soon_threadsafe; the flush clears the flag before draining, so an
    expiry appended during a drain is either drained or triggers a new flush.
    deque.append/popleft are atomic, so no lock is needed."""

    __slots__ = ("loop", "items", "scheduled", "__weakref__")

    def __init__(self, loop) -> None:
        self.loop = loop
        self.items: collections.deque = collections.deque()
        self.scheduled = False

    def push(self, timer: _BridgeTimer) -> None:  # on the wheel thread
        self.items.append(timer)
        if not self.scheduled:
            self.scheduled = True
            try:
                self.loop.call_soon_threadsafe(self.flush)
            except RuntimeError:  # the loop closed meanwhile: nobody to run them
                self.items.clear()

    def flush(self) -> None:  # on the loop
        self.scheduled = False
        items = self.items
        while items:
            timer = items.popleft()
            if timer._cancelled:  # cancelled on the loop after it fired
                continue
            timer._fired = True
            try:
                timer._callback(*timer._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.loop.call_exception_handler(
                    {
                        "message": f"Exception in callback {timer!r}",
                        "exception": exc,
                        "handle": timer,
                    }
                )


class _BridgeTimer:
    """What sleep() and Timeout hold on a loop without a wheel: cancel() is
    honoured on the loop even after the wheel thread fired the timer."""

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
        wheel = self.wheel()
        # The loop's clock and the wheel's are both CLOCK_MONOTONIC, but a
        # loop may cache its time (uvloop does): carry the delay over.
        delay = when - loop.time()
        timer._handle = wheel.call_later(delay, queue.push, timer, context=_NO_CONTEXT)
        return timer


_bridge = _Bridge()


def _call_at(loop, when: float, callback, *args):
    if isinstance(loop, WheelEventLoop):
        return loop.call_at(when, callback, *args)
    return _bridge.call_at(loop, when, callback, *args)


# ---- sleep, timeout, timeout_at ---------------------------------------------


def _set_result_unless_cancelled(fut: asyncio.Future, result: Any) -> None:
    if not fut.cancelled():
        fut.set_result(result)


async def sleep(delay: float, result: Any = None) -> Any:
    """``asyncio.sleep``, with its timer on a wheel."""
    loop = _events.get_running_loop()
    if delay <= 0 or isinstance(loop, WheelEventLoop):
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
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
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
