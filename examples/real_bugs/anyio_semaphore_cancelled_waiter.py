"""anyio: a waiter cancelled as a semaphore slot is handed to it takes the
slot with it, and the pool shrinks for good.

Upstream: agronholm/anyio issue #387 ("Potential race condition in Lock"),
fixed in 3.4.0 ("Fixed race condition in Lock and Semaphore classes when a
task waiting on acquire() is cancelled while another task is waiting to
acquire the same primitive").  Buggy: anyio 3.3.4; fixed: anyio 3.4.0.
The Semaphore half of the fix (``anyio_lock_cancelled_waiter`` is the Lock
half).

``Semaphore.release()`` with a waiter queued does not raise the count: it
hands the slot straight to the first waiter by setting its event.  If that
waiter's cancel scope has expired in the same loop iteration, just before
(its wait is already cancelled, its task has not run yet), the waiter wakes
with the cancellation, sees its event set, and leaves without giving the
slot back: one slot fewer from then on.  3.4.0 releases it in that case.
"""

import asyncio
from functools import partial

import anyio

from . import _shared, dist_version

REF = "agronholm/anyio#387 (the Semaphore half of the 3.4.0 fix)"
BUGGY = (None, "anyio==3.3.4")
FIXED = (None, "anyio==3.4.0")
PROMISE = "a request that gives up waiting for a slot does not take the slot with it"

SLOTS = 2


def installed() -> str:
    return dist_version("anyio")


def _check_slots(sem: anyio.Semaphore) -> None:
    assert sem.value == SLOTS, (
        f"nobody holds a slot, yet {SLOTS - sem.value} of {SLOTS} are taken ({sem.statistics()})"
    )


async def scenario() -> None:
    """Six workers share a pool of two connections behind an
    anyio.Semaphore(2); each request holds a slot 20 ms and gives up after
    50 ms (move_on_after), then the worker pauses 15 ms.  The workers serve
    four batches of 5 requests each; once a batch is done both slots must
    be free."""
    sem = anyio.Semaphore(SLOTS)
    for _ in range(4):
        await _shared.share(sem, [0.05] * 6, anyio.move_on_after, uses=5)
        _check_slots(sem)  # nobody holds or waits for a slot here


def on_stock() -> None:
    """On the stock loop: A holds the only free slot until t0, B waits for
    it and is cancelled at t0 + 1 ms (a plain task.cancel(), as a deadline
    does), and the loop is busy past both (a 30 ms blocking call, as on a
    loaded machine), so it runs both timers in one batch, in deadline order:
    A is woken, B is cancelled, then A hands the slot to B before B has
    run."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sem = anyio.Semaphore(SLOTS)
        a_done = loop.create_future()

        async def hold(until: asyncio.Future) -> None:
            async with sem:
                await until

        async def b() -> None:
            async with sem:
                pass

        other_done = loop.create_future()
        other = asyncio.create_task(hold(other_done))  # one slot stays taken
        ta = asyncio.create_task(hold(a_done))
        await asyncio.sleep(0)  # A and the other hold both slots
        tb = asyncio.create_task(b())
        await asyncio.sleep(0)  # B waits for one
        _shared.in_one_batch(partial(a_done.set_result, None), tb.cancel)
        await asyncio.gather(ta, tb, return_exceptions=True)
        other_done.set_result(None)
        await other
        _check_slots(sem)

    asyncio.run(main())
