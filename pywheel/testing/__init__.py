"""Testing code that depends on time: virtual time and timing fuzz for asyncio.

- ``VirtualEventLoop`` / ``new_event_loop`` (a ``loop_factory``) / ``run``
  (and ``EventLoopPolicy`` where asyncio still has policies):
  a ``WheelEventLoop`` whose clock jumps straight to the next timer when
  nothing is ready, so sleeping for an hour takes no real time, and the same
  program gives the same timestamps every run.
- ``timings(max_late=, max_cost=, max_jitter=)``: a hypothesis strategy of
  ``Timing`` objects that perturb a run as a loaded machine would (the loop
  wakes late, callbacks take time, the outside world answers late), shrink
  toward the punctual run and replay exactly.
- ``call_external`` / ``latency``: events that stand for the outside world.
- ``outside()``: declares work on another thread the loop must wait for.
- ``Trace`` (``trace=`` of the loop and ``run``): what a run did, on virtual
  time, in the program's words; ``Trace.write_perfetto``, ``draw_race`` (an
  SVG of a punctual and a failing run) and ``race_timeline`` show a race.
- A pytest plugin (``virtual_loop`` fixture, ``@pytest.mark.virtual_time``),
  registered through the ``pytest11`` entry point.

hypothesis is needed only by ``timings()``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TypeVar, overload

from .._tracebacks import hide as __tracebackhide__  # noqa: F401  (pytest: see there)
from . import _trace
from ._loop import (
    DEFAULT_AUTOJUMP_THRESHOLD,
    DEFAULT_QUANTUM,
    DeadlockError,
    TimeLimitError,
    VirtualEventLoop,
    VirtualTimeError,
    new_event_loop,
    outside,
    run,
)
from ._sites import _user_frame, callback_site
from ._timing import Timing, timings
from ._trace import Trace, race_timeline

# EventLoopPolicy is made on first access, only where asyncio still has
# policies (deprecated in 3.14, removed in 3.16), and is not in __all__: a
# plain or star import never touches a deprecated name.


def __getattr__(name: str) -> Any:
    if name == "EventLoopPolicy":
        from ._loop import policy

        return policy(2)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_AUTOJUMP_THRESHOLD",
    "DEFAULT_QUANTUM",
    "DeadlockError",
    "TimeLimitError",
    "Timing",
    "Trace",
    "VirtualEventLoop",
    "VirtualTimeError",
    "call_external",
    "latency",
    "new_event_loop",
    "draw_race",
    "outside",
    "race_timeline",
    "run",
    "timings",
]


def draw_race(punctual: Trace, failing: Trace, path=None, *, title: str = "") -> str:
    """An SVG picture of two traced runs of one program, the punctual one
    above the failing one (see ``Trace``); written to ``path`` if given
    (``.png``: converted, if cairosvg or rsvg-convert is installed).
    Returns the SVG text."""
    from ._draw import draw_race as draw

    return draw(punctual, failing, path, title=title)


_T = TypeVar("_T")


def call_external(delay: float, callback, *args: Any, context=None) -> asyncio.TimerHandle:
    """An event from the outside world (a reply, a peer's message) arriving
    after ``delay`` seconds: ``loop.call_later(delay, callback, *args)``,
    plus up to the Timing's ``max_jitter`` on a perturbed virtual loop (each
    event independently, so they may overtake one another and the program's
    own timers)."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, VirtualEventLoop) and (loop._timing is not None or loop._trace is not None):
        frame = sys._getframe(1)

        def site() -> str:
            return f"external {callback_site(callback)} from {_user_frame(frame)}"

        jitter = loop._external_jitter(site)
        delay += jitter
        trace = loop._trace
        if trace is not None:
            _trace.outside_event(loop, site, jitter)  # the timer below is this event
            try:
                return loop.call_later(delay, callback, *args, context=context)
            finally:
                trace._sent()
    return loop.call_later(delay, callback, *args, context=context)


@overload
async def latency(delay: float) -> None: ...
@overload
async def latency(delay: float, result: _T) -> _T: ...
async def latency(delay: float, result: Any = None) -> Any:
    """``await asyncio.sleep(delay)`` standing for the outside world (a remote
    call's round trip): up to the Timing's ``max_jitter`` later on a perturbed
    virtual loop."""
    loop = asyncio.get_running_loop()
    if isinstance(loop, VirtualEventLoop) and (loop._timing is not None or loop._trace is not None):
        frame = sys._getframe(1)

        def site() -> str:
            return f"latency() in {_user_frame(frame)}"

        jitter = loop._external_jitter(site)
        delay += jitter
        trace = loop._trace
        if trace is not None and delay > 0:
            # asyncio.sleep schedules its timer before it first suspends:
            # that timer is this event.
            _trace.outside_event(loop, site, jitter)
            try:
                return await asyncio.sleep(delay, result)
            finally:
                trace._sent()
    return await asyncio.sleep(delay, result)


# Every public class and function says it is pywheel.testing's (a report
# reads pywheel.testing.DeadlockError, not pywheel.testing._loop.
# DeadlockError), which is also where pickle looks it up.  The cost:
# inspect.getsource() of a class looks in this file and does not find it.
for _name in __all__:
    _obj = globals().get(_name)
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = __name__
del _name, _obj
