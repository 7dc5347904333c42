"""anyio: ``Condition.notify()`` is lost when the task it wakes is cancelled
before it runs.

Upstream: agronholm/anyio PR #1075 ("Fix Condition.wait() lost notification
on task cancellation"), the fix released in anyio 4.13.0 ("This task was
notified but could not act on it, so pass it on to the next task").
Buggy: anyio 4.12.1; fixed: anyio 4.13.0.  The same race as CPython's
python/cpython#112202, in anyio's own Condition.

``notify(1)`` pops the first waiter's event and sets it.  If that waiter's
task is cancelled before it runs (in the same loop iteration), it leaves
``wait()`` with the cancellation and the notification goes with it: no
other waiter is woken though the condition holds.
"""

import anyio

from . import _shared, dist_version

REF = "agronholm/anyio#1075 (fix released in 4.13.0)"
BUGGY = (None, "anyio==4.12.1")
FIXED = (None, "anyio==4.13.0")
PROMISE = "a job is picked up at once while a consumer is idle"


def installed() -> str:
    return dist_version("anyio")


async def scenario() -> None:
    """Three consumers take jobs that arrive every 100 ms and take 10 ms
    each; at about t=0.3 s an operator's request to scale the pool down
    arrives (``latency()``: it may arrive a little late) and its handler
    retires the consumer idle longest (cancels its scope, anyio's way to
    stop a task).  A job must be picked up within 50 ms when it arrives
    while a consumer is idle."""
    await _shared.lost_notify_scenario(anyio.Condition(), anyio.CancelScope)


def on_stock() -> None:
    """On the stock loop: a job arrives at t0, the request to retire the
    longest-idle consumer at t0 + 1 ms, and the loop is busy past both (a
    30 ms blocking call, as on a loaded machine), so it runs both timers in
    one batch, in deadline order: the notification goes to the consumer
    being retired."""
    _shared.lost_notify_on_stock(anyio.Condition, anyio.CancelScope)
