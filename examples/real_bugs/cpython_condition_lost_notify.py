"""CPython asyncio: ``Condition.notify()`` is lost when the task it wakes is
cancelled before it runs.

Upstream: python/cpython issue #112202 ("Race between asyncio
Condition.notify() and Task.cancel() may result in lost wakeups"), fixed by
PR #112201 in 3.13.0.  Buggy: CPython 3.12.1 (and 3.11); fixed: 3.13.0.

``notify(1)`` resolves the future of the first waiter.  If that waiter's
task is cancelled before it runs (in the same loop iteration), it leaves
``wait()`` with CancelledError, and the notification goes with it: no other
waiter is woken though the condition holds.  3.13 passes the notification
on to the next waiter.
"""

import asyncio

from . import _shared, dist_version

REF = "python/cpython#112202 (fixed by PR #112201)"
BUGGY = ("3.12", None)
FIXED = ("3.13", None)
PROMISE = "a job is picked up at once while a consumer is idle"


def installed() -> str:
    return dist_version(None)


async def scenario() -> None:
    """Three consumers take jobs that arrive every 100 ms and take 10 ms
    each; at about t=0.3 s an operator's request to scale the pool down
    arrives (``latency()``: it may arrive a little late) and its handler
    retires the consumer idle longest (cancels its task).  A job must be
    picked up within 50 ms when it arrives while a consumer is idle."""
    await _shared.lost_notify_scenario(asyncio.Condition(), _shared.own_task)


def on_stock() -> None:
    """On the stock loop: a job arrives at t0, the request to retire the
    longest-idle consumer at t0 + 1 ms, and the loop is busy past both (a
    30 ms blocking call, as on a loaded machine), so it runs both timers in
    one batch, in deadline order: the notification goes to the consumer
    being retired."""
    _shared.lost_notify_on_stock(asyncio.Condition, _shared.own_task)
