"""anyio: a task that starts waiting for a free Lock, behind a waiter that
was just cancelled, waits forever.

Upstream: agronholm/anyio PR #1145 ("Fix asyncio lock waiter deadlocks
after cancellation"), released in anyio 4.14.0.  Buggy: anyio 4.13.0;
fixed: anyio 4.14.0.

On asyncio, 4.13's ``Lock.release()`` skips a waiter whose future was
cancelled but leaves it in the queue until that waiter's task runs and
removes itself; with no other waiter it sets the lock free.  A task that
calls ``acquire()`` in between finds the lock free but the queue not empty,
so it queues up -- and nobody will ever release the lock to it.  4.14
drops the cancelled waiter in ``release()``.
"""

import asyncio
from functools import partial

import anyio

from . import _shared, dist_version

REF = "agronholm/anyio#1145"
BUGGY = (None, "anyio==4.13.0")
FIXED = (None, "anyio==4.14.0")
PROMISE = "a task waiting for a lock gets it once nobody holds it"


def installed() -> str:
    return dist_version("anyio")


async def scenario() -> None:
    """Two request handlers and a background job share a connection behind
    an anyio.Lock; each use holds it 20 ms, then pauses 15 ms.  A request
    gives up waiting after 50 ms (move_on_after); the background job has no
    deadline.  Everyone must finish 20 uses, and the lock be free at the
    end."""
    lock = anyio.Lock()
    await _shared.share(lock, [0.05, 0.05, float("inf")], anyio.move_on_after)
    assert not lock.locked(), f"nobody holds the lock, yet it is locked: {lock.statistics()}"


def on_stock() -> None:
    """On the stock loop: A holds the lock until t0, B waits for it and is
    cancelled at t0 + 2 ms, C asks for it at t0 + 1 ms, and the loop is busy
    past all three (a 30 ms blocking call, as on a loaded machine), so it
    runs them in one batch, in deadline order: A releases (B's wait is
    already cancelled, so the lock is set free), C queues behind B, and B
    leaves."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lock = anyio.Lock()
        a_done = loop.create_future()
        c_go = loop.create_future()
        c_got = loop.create_future()

        async def a() -> None:
            async with lock:
                await a_done

        async def b() -> None:
            async with lock:
                pass

        async def c() -> None:
            await c_go
            async with lock:
                c_got.set_result(None)

        ta = asyncio.create_task(a())
        await asyncio.sleep(0)  # A holds the lock
        tb = asyncio.create_task(b())
        tc = asyncio.create_task(c())
        await asyncio.sleep(0)  # B waits for the lock, C for its moment
        _shared.in_one_batch(
            partial(a_done.set_result, None), partial(c_go.set_result, None), tb.cancel
        )
        try:
            await asyncio.wait_for(asyncio.shield(c_got), 0.5)
        except TimeoutError:
            raise AssertionError(f"C waits for a lock nobody holds: {lock.statistics()}") from None
        finally:
            for t in (ta, tb, tc):
                t.cancel()
            await asyncio.gather(ta, tb, tc, return_exceptions=True)

    asyncio.run(main())
