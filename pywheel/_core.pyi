"""Type stubs for pywheel._core, the C extension.

Checked against the runtime by tests/test_stubs.py (mypy.stubtest).
"""

from asyncio import Handle
from collections.abc import Callable
from contextvars import Context
from typing import Any, Literal, Self, TypedDict, TypeVarTuple, Unpack, final, type_check_only

from typing_extensions import disjoint_base

_Ts = TypeVarTuple("_Ts")
_ExceptionHandler = Callable[[Wheel, dict[str, Any]], object]

# What Wheel.stats() returns: a plain dict at run time, so this name exists for
# type checkers only.
@type_check_only
class _WheelStats(TypedDict):
    scheduled: int
    fired: int
    cancelled: int
    pending: int
    errors: int
    batches: int
    wakeups: int
    max_batch: int
    skipped_runs: int
    rescheduled: int
    late_p50: float
    late_p99: float
    late_max: float
    tick: float

@final
class TimerHandle:
    """A scheduled callback.  Ordered by deadline; a Wheel's handle equals only
    itself, an event loop's equals its twins, as asyncio.TimerHandle does."""

    def cancel(self) -> bool: ...  # an event loop's handle returns None, as asyncio's
    def cancelled(self) -> bool: ...
    def reschedule(self, when: float) -> bool: ...
    def reschedule_later(self, delay: float) -> bool: ...
    def when(self) -> float: ...
    def get_context(self) -> Context: ...
    @property
    def interval(self) -> float | None: ...
    @property
    def _when(self) -> float: ...  # when(), under asyncio.TimerHandle's attribute name
    def __lt__(self, other: TimerHandle, /) -> bool: ...
    def __le__(self, other: TimerHandle, /) -> bool: ...
    def __gt__(self, other: TimerHandle, /) -> bool: ...
    def __ge__(self, other: TimerHandle, /) -> bool: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class Wheel:
    def __new__(cls, tick: float = 0.001) -> Self: ...
    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        /,
        *args: *_Ts,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        /,
        *args: *_Ts,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def call_every(
        self,
        interval: float,
        callback: Callable[[Unpack[_Ts]], object],
        /,
        *args: *_Ts,
        first: float | None = None,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def time(self) -> float: ...
    def time_ns(self) -> int: ...
    def close(self, timeout: float | None = None) -> list[TimerHandle]: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc_info: object) -> Literal[False]: ...
    def __len__(self) -> int: ...
    def set_exception_handler(self, handler: _ExceptionHandler | None) -> None: ...
    def get_exception_handler(self) -> _ExceptionHandler | None: ...
    def call_exception_handler(self, context: dict[str, Any]) -> None: ...
    def default_exception_handler(self, context: dict[str, Any]) -> None: ...
    def stats(self) -> _WheelStats: ...

class ManualWheel(Wheel):
    def __new__(cls, tick: float = 0.001, *, start: float = 0.0) -> Self: ...
    def advance(self, seconds: float) -> int: ...
    def advance_to(self, when: float) -> int: ...
    def next_deadline(self) -> float | None: ...
    def next_when(self) -> float | None: ...
    def advance_to_next(self) -> int: ...
    def run_due(self, when: float) -> int: ...
    def collect_due(self, when: float) -> int: ...
    def _collect_for_loop(self, end: float, now: float, /) -> int: ...
    def run_collected(self) -> int: ...
    def _stock_handles(self) -> None: ...
    def _call_soon_at(
        self,
        when: float,
        callback: Callable[..., object],
        /,
        *args: Any,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def _run_soon(self, handle: TimerHandle, /) -> int: ...

@final
class _LoopTimers:
    """WheelEventLoop's and pywheel.uvloop.Loop's call_later/call_at in C
    (the loops install its methods on themselves outside debug mode).  time:
    the loop's clock, called as time(loop) (None: time.monotonic()); arm:
    called as arm(loop, when) after scheduling a deadline before
    arm_below; call_soon (with time): a deadline <= time(loop) becomes a
    soon timer, queued as call_soon(loop, wheel._run_soon, handle)."""

    arm_below: float
    def __new__(
        cls,
        wheel: ManualWheel,
        loop: object,
        call_later: Callable[..., object],
        call_at: Callable[..., object],
        time: Callable[[Any], float] | None = None,
        arm: Callable[[Any, float], object] | None = None,
        call_soon: Callable[..., object] | None = None,
        /,
    ) -> Self: ...
    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        /,
        *args: *_Ts,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        /,
        *args: *_Ts,
        context: Context | None = None,
    ) -> TimerHandle: ...
    def _set_plain(self, at_ok: bool, later_ok: bool, /) -> None: ...

@final
class _LoopSoon:
    """WheelEventLoop's call_soon in C (the loop installs it on itself outside
    debug mode): an asyncio.Handle made as Handle.__init__ makes it and
    appended to the loop's _ready deque; everything else goes to the Python
    call_soon given.  TypeError if handle_type's layout is not the known one."""

    def __new__(
        cls, loop: object, call_soon: Callable[..., object], handle_type: type, /
    ) -> Self: ...
    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: Context | None = None,
    ) -> Handle: ...
    def _set_plain(self, ok: bool, ready: object, /) -> None: ...

def _shutdown(grace: float, /) -> None: ...
def _after_fork_child() -> None: ...
def _fail_alloc_after(n: int, /) -> None: ...
def _batch_live(wheel: Wheel, /) -> tuple[int, int]: ...
