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
import random
import weakref
from asyncio import events as _events
from typing import Any

from ._timing import Timing, _check_max

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
    def parse(cls, token: str) -> Schedule:
        try:
            late, cost, jitter, seed = token.split(",")
            return cls(
                _check_max("max_late", float(late)),
                _check_max("max_cost", float(cost)),
                _check_max("max_jitter", float(jitter)),
                int(seed, 16),
            )
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"--timing-replay={token!r} is not a token from a --timing-fuzz report "
                f"(max_late,max_cost,max_jitter,seed): {exc}"
            ) from None

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


def seed_for(base: int, nodeid: str, run: int) -> int:
    digest = hashlib.blake2b(f"{base}\0{nodeid}\0{run}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Context:
    """What loops made during one test run get."""

    __slots__ = ("limit", "clocks", "schedule", "loops", "__weakref__")

    def __init__(self, limit: float | None, clocks: bool, schedule: Schedule | None) -> None:
        self.limit = limit
        self.clocks = clocks
        self.schedule = schedule
        self.loops: list = []  # weakrefs, in the order they were made

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"clocks": self.clocks}
        if quantum is not None:
            kw["quantum"] = quantum
        if self.limit is not None:
            kw["limit"] = self.limit
        if self.schedule is not None:
            kw["timing"] = self.schedule.timing(len(self.loops))
        return kw

    def made(self, loop) -> None:
        self.loops.append(weakref.ref(loop))

    def virtual_times(self) -> list[float]:
        return [loop.time() for ref in self.loops if (loop := ref()) is not None]


#: The running test's context (None between tests: loops get the defaults).
current: Context | None = None
#: Session defaults, for loops made outside a test (session fixtures).
session_clocks = True
#: --virtual-time-quantum (None: the loop's default), for every loop.
quantum: float | None = None


def make_loop(**overrides: Any):
    from ._loop import VirtualEventLoop

    ctx = current
    if ctx is not None:
        kwargs = ctx.kwargs()
    else:
        kwargs = {"clocks": session_clocks}
        if quantum is not None:
            kwargs["quantum"] = quantum
    kwargs.update(overrides)
    loop = VirtualEventLoop(**kwargs)
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
