"""The program's own clocks on virtual time.

While a ``VirtualEventLoop(clocks=True)`` runs (inside ``run_forever``), the
clock functions of the ``time`` module called *from that loop's thread* read
its virtual time; every other thread, and the loop's thread when no virtual
loop runs there, reads the real clocks.  The functions are swapped in the
``time`` module while at least one such loop runs anywhere in the process,
and put back when the last one stops (also when its run raised).

Each clock reads ``anchor + loop.time()``: it advances as the loop's clock
does, so intervals agree with the loop's to the nanosecond -- except that,
as a real clock, it never reads the same twice: a read that would not be
later than the clock's last one reads one nanosecond past it (``_later``).  The anchor
is set when a run starts so that the clock reads what the real clock reads at
that moment, and it only ever moves forward, so a clock never goes backwards
while the loop runs, nor when a run starts.  (When the run ends the real
clocks are back, and they may read less than the last virtual reading if
virtual time outran real time: restoring real time cannot avoid that.)

- ``time.monotonic``/``monotonic_ns``, ``perf_counter``/``perf_counter_ns``:
  their real value when the run started, plus virtual time elapsed;
- ``time.time``/``time_ns``: the real wall clock when the run started, plus
  virtual time elapsed;
- ``time.sleep`` on the loop's thread still sleeps for real, and moves those
  clocks (not the loop's) by the real time slept, so a blocking poll such as
  ``while time.monotonic() < deadline: time.sleep(0.01)`` ends as it would.

Why ``anchor + loop.time()`` and not ``loop.time()`` itself: the absolute
value of ``time.monotonic()`` means nothing (only differences do), and a
program may hold a reading taken before the run; reading ``loop.time()``
(which starts at 0 by default) would make that clock jump backwards.

Not covered: functions bound before the run (``from time import monotonic``,
a default argument ``timer=time.monotonic``) keep the real function, as do
C code, ``time.clock_gettime()``, ``process_time()`` and ``thread_time()``.
``datetime.datetime.now()`` stays real: its C implementation reads the system
clock directly, and swapping the ``datetime`` class (as freezegun does)
breaks ``isinstance`` checks and pickling, which is neither cheap nor safe;
``datetime.fromtimestamp(time.time())`` follows virtual time.  time-machine
patches the C functions underneath these names: on the loop's thread the
virtual clocks stay in front of its travel (its C module, imported while a
run goes, is imported with the real functions in place: it takes what it
finds there for C functions, see ``_RealClocksForImports``).
"""

from __future__ import annotations

import contextlib
import math as _math
import sys
import threading
import time as _time
import types
import weakref
from typing import Any

_get_ident = threading.get_ident


if hasattr(_time, "clock_gettime") and hasattr(_time, "CLOCK_MONOTONIC"):

    def _elapsed() -> float:
        """Real seconds, from a clock nobody swaps (for time slept)."""
        return _time.clock_gettime(_time.CLOCK_MONOTONIC)

else:
    # Windows: no clock_gettime.  perf_counter (QueryPerformanceCounter on
    # every version, where monotonic is GetTickCount64's 15.6 ms steps before
    # 3.13), bound here, before anything can swap the module's attribute.
    _elapsed = _time.perf_counter


#: The functions swapped while a virtual loop with clocks runs.
NAMES = ("monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns", "sleep")

_lock = threading.Lock()
_active: dict[int, Clocks] = {}  # thread id -> the clocks of the loop running there
_real: dict[str, Any] = {name: getattr(_time, name) for name in NAMES}
_original = dict(_real)  # what the time module held when pywheel came
_runs = 0  # virtual runs with clocks, in every thread


class _TimeModule(types.ModuleType):
    """The ``time`` module's class while a virtual run with clocks goes.

    freezegun (and a monkeypatch undone) ends a block by putting back the
    functions it captured before the run: real clocks, for the rest of the
    run.  Put back here, such a function goes under the virtual clock, in
    ``_real``, and the virtual clock stays: from the very next reading, with
    no window of real readings.  Anything else assigned (freezegun's frozen
    clock) goes in as asked.  Why not check at each loop iteration instead:
    readings in the same callback after the block would still be real.  The
    cost: a ``time.<name>`` lookup anywhere in the process, while such a run
    goes, takes some 20-30 ns more (CPython specializes attribute reads only
    on plain modules); an iteration pays nothing."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        wrapper = _WRAPPERS.get(name)
        if (
            wrapper is not None
            and _runs
            and value is not wrapper
            and (value is _real[name] or value is _original[name])
        ):
            _real[name] = value  # what real readings call, and what goes back at the end
            value = wrapper
        super().__setattr__(name, value)


class Clocks:
    """One loop's anchors: each clock reads ``anchor + loop._vtime``.

    ``loop`` is a weak reference: the loop holds its Clocks, and a strong
    reference back would make every VirtualEventLoop a reference cycle, alive
    after its last use until the cyclic garbage collector runs (with its
    wheel, selector and every object its callbacks held).  The wrappers only
    read it while the loop runs, when the running loop is alive anyway."""

    __slots__ = ("loop", "mono", "perf", "wall", "mono_ns", "perf_ns", "wall_ns", "last")

    def __init__(self, loop) -> None:
        self.loop = weakref.ref(loop)
        inf = float("-inf")
        self.mono = self.perf = self.wall = inf
        self.mono_ns = self.perf_ns = self.wall_ns = None
        #: The last reading of each clock (see _later).
        self.last: dict[str, float | int] = {}

    def _anchor(self) -> None:
        """At the start of a run: each clock reads at least its real value now."""
        vt = self.loop()._vtime
        vt_ns = round(vt * 1e9)
        real = _real
        self.mono = max(self.mono, real["monotonic"]() - vt)
        self.perf = max(self.perf, real["perf_counter"]() - vt)
        self.wall = max(self.wall, real["time"]() - vt)
        for attr, name in (
            ("mono_ns", "monotonic_ns"),
            ("perf_ns", "perf_counter_ns"),
            ("wall_ns", "time_ns"),
        ):
            a = real[name]() - vt_ns
            old = getattr(self, attr)
            setattr(self, attr, a if old is None or a > old else old)

    def _slept(self, seconds: float) -> None:
        ns = round(seconds * 1e9)
        self.mono += seconds
        self.perf += seconds
        self.wall += seconds
        self.mono_ns += ns
        self.perf_ns += ns
        self.wall_ns += ns


def enter(clocks: Clocks) -> Clocks | None:
    """A run of ``clocks.loop`` starts on this thread; returns what
    ``leave()`` puts back (a loop refused because another one runs on this
    thread must not take that one's clocks away)."""
    global _runs
    ident = _get_ident()
    with _lock:
        if _runs == 0:
            _install()
        _runs += 1
        clocks._anchor()
        previous = _active.get(ident)
        _active[ident] = clocks
    return previous


def leave(clocks: Clocks, previous: Clocks | None) -> None:
    """The run ends (normally or not)."""
    global _runs
    ident = _get_ident()
    with _lock:
        if previous is not None:
            _active[ident] = previous
        elif _active.get(ident) is clocks:
            del _active[ident]
        _runs -= 1
        if _runs == 0:
            _uninstall()


class _RealClocksForImports:
    """On ``sys.meta_path`` while a virtual run with clocks goes: the C
    extensions named here take the functions they find in ``time`` at import
    for C functions, and crash the interpreter when they are ours
    (time-machine's ``_time_machine`` patches them in place): they are
    imported with the real ones back in the module, then ours return."""

    names = frozenset({"_time_machine"})

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in cls.names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is cls or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _RealClocksLoader(spec.loader)
                return spec
        return None


class _RealClocksLoader:
    __slots__ = ("_loader",)

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        with _real_clocks():
            return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        with _real_clocks():
            self._loader.exec_module(module)


@contextlib.contextmanager
def _real_clocks():
    d = vars(_time)  # (past _TimeModule.__setattr__)
    ours = [name for name in NAMES if d.get(name) is _WRAPPERS[name]]
    for name in ours:
        d[name] = _real[name]
    try:
        yield
    finally:
        for name in ours:
            if d.get(name) is _real[name]:
                d[name] = _WRAPPERS[name]


def _install() -> None:
    if _RealClocksForImports not in sys.meta_path:
        sys.meta_path.insert(0, _RealClocksForImports)
    for name in NAMES:
        current = getattr(_time, name)
        if current is not _WRAPPERS[name]:
            _real[name] = current  # whatever was there (another tool's patch included)
        setattr(_time, name, _WRAPPERS[name])
    if type(_time) is types.ModuleType:  # (a class someone else gave it stays)
        _time.__class__ = _TimeModule


def _uninstall() -> None:
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(_RealClocksForImports)
    if type(_time) is _TimeModule:
        _time.__class__ = types.ModuleType
    for name in NAMES:
        # Put back only our own: a patch someone made meanwhile stays theirs.
        if getattr(_time, name) is _WRAPPERS[name]:
            setattr(_time, name, _real[name])


def active() -> bool:
    """True while the calling thread runs a virtual loop with clocks."""
    return _get_ident() in _active


# ---- the wrappers: one dict lookup, then virtual or real ------------------------


def _later(c: Clocks, name: str, value):
    """``value``, or one nanosecond past the clock's last reading if that is
    not less: a real clock moves between two reads (tens of nanoseconds for
    a Python call), so code that times a synchronous call, or an await that
    never yields to the loop, measures more than 0, as it does on any real
    machine (redis-py's connection-pool timings).  Between iterations the
    clocks follow the loop's time again; they lead it by a nanosecond per
    read made within one iteration, no more."""
    last = c.last.get(name)
    if last is not None and value <= last:
        value = last + (1 if type(value) is int else 1e-9)
        if value == last:  # a float too large for a nanosecond step
            value = _math.nextafter(last, _math.inf)
    c.last[name] = value
    return value


def monotonic() -> float:
    c = _active.get(_get_ident())
    if c is None:
        return _real["monotonic"]()
    return _later(c, "monotonic", c.mono + c.loop()._vtime)


def monotonic_ns() -> int:
    c = _active.get(_get_ident())
    if c is None:
        return _real["monotonic_ns"]()
    return _later(c, "monotonic_ns", c.mono_ns + round(c.loop()._vtime * 1e9))


def perf_counter() -> float:
    c = _active.get(_get_ident())
    if c is None:
        return _real["perf_counter"]()
    return _later(c, "perf_counter", c.perf + c.loop()._vtime)


def perf_counter_ns() -> int:
    c = _active.get(_get_ident())
    if c is None:
        return _real["perf_counter_ns"]()
    return _later(c, "perf_counter_ns", c.perf_ns + round(c.loop()._vtime * 1e9))


def time() -> float:
    c = _active.get(_get_ident())
    if c is None:
        return _real["time"]()
    return _later(c, "time", c.wall + c.loop()._vtime)


def time_ns() -> int:
    c = _active.get(_get_ident())
    if c is None:
        return _real["time_ns"]()
    return _later(c, "time_ns", c.wall_ns + round(c.loop()._vtime * 1e9))


def sleep(seconds: float) -> None:
    c = _active.get(_get_ident())
    if c is None:
        return _real["sleep"](seconds)
    t0 = _elapsed()
    try:
        _real["sleep"](seconds)
    finally:
        c._slept(max(0.0, _elapsed() - t0))


for _f in (monotonic, monotonic_ns, perf_counter, perf_counter_ns, time, time_ns, sleep):
    _f.__doc__ = (
        f"time.{_f.__name__}, on virtual time in a thread running a pywheel.testing "
        f"VirtualEventLoop with clocks=True (real elsewhere)."
    )
_WRAPPERS = {
    f.__name__: f
    for f in (monotonic, monotonic_ns, perf_counter, perf_counter_ns, time, time_ns, sleep)
}
del _f
