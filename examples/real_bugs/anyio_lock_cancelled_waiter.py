"""anyio: a waiter cancelled as the lock is handed to it keeps the lock forever.

Upstream: agronholm/anyio issue #387 ("Potential race condition in Lock"),
fixed in 3.4.0 ("Fixed race condition in Lock and Semaphore classes when a
task waiting on acquire() is cancelled while another task is waiting to
acquire the same primitive").  Buggy: anyio 3.3.4; fixed: anyio 3.4.0.

``Lock.release()`` makes the first waiter the owner and sets its event.  If
that waiter's cancel scope has expired in the same loop iteration, just
before (its wait is already cancelled, its task has not run yet), the
waiter wakes with the cancellation, sees its event set, and leaves without
releasing: the lock stays owned by a task that has moved on, and everyone
else waits forever.  3.4.0 releases the lock in that case.
"""

import asyncio
from functools import partial

import anyio

from . import _shared, dist_version

REF = "agronholm/anyio#387"
BUGGY = (None, "anyio==3.3.4")
FIXED = (None, "anyio==3.4.0")
PROMISE = "a request that gives up waiting for the lock does not keep it"


def installed() -> str:
    return dist_version("anyio")


async def scenario() -> None:
    """Three workers share a connection behind an anyio.Lock; each request
    holds it 20 ms and gives up after 50 ms (move_on_after), then the worker
    pauses 15 ms.  Every worker must finish its 20 requests, and the lock
    must be free at the end."""
    lock = anyio.Lock()
    await _shared.share(lock, [0.05] * 3, anyio.move_on_after)
    assert not lock.locked(), f"nobody holds the lock, yet it is locked: {lock.statistics()}"


def on_stock() -> None:
    """On the stock loop: A holds the lock until t0, B waits for it and is
    cancelled at t0 + 1 ms (the issue's own shape: a plain task.cancel(),
    as a deadline does), and the loop is busy past both (a 30 ms blocking
    call, as on a loaded machine), so it runs both timers in one batch, in
    deadline order: A is woken, B is cancelled, then A releases to B before
    B has run."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lock = anyio.Lock()
        a_done = loop.create_future()

        async def a() -> None:
            async with lock:
                await a_done

        async def b() -> None:
            async with lock:
                pass

        ta = asyncio.create_task(a())
        await asyncio.sleep(0)  # A holds the lock
        tb = asyncio.create_task(b())
        await asyncio.sleep(0)  # B waits for it
        _shared.in_one_batch(partial(a_done.set_result, None), tb.cancel)
        await asyncio.gather(ta, tb, return_exceptions=True)
        assert not lock.locked(), f"nobody holds the lock, yet it is locked: {lock.statistics()}"

    asyncio.run(main())
