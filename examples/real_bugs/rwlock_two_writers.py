"""aiorwlock: two writers hold the write lock at once.

Upstream: aio-libs/aiorwlock PR #235 ("Fix a bug that makes concurrent
writes possible under some (rare) conjunctions"), released in 1.2.0.
Buggy: aiorwlock 1.1.0 (and earlier); fixed: 1.2.0.

Releasing the lock wakes the first waiting writer by resolving its future,
but 1.1.0 counts that writer as holding the lock only when its task next
runs.  A writer that calls ``acquire()`` in between -- one whose own timer
fell due in the same loop iteration as the release -- finds the lock free
and takes it too; the woken writer then runs and also holds it.  1.2.0
counts the woken writer as the holder at the moment it is woken.
"""

import asyncio
from functools import partial

import aiorwlock

from . import _shared, dist_version

REF = "aio-libs/aiorwlock#235"
BUGGY = (None, "aiorwlock==1.1.0")
FIXED = (None, "aiorwlock==1.2.0")
PROMISE = "the write lock is held by one writer at a time"


def installed() -> str:
    return dist_version("aiorwlock")


class _Exclusive:
    """Counts the writers inside; the promise is that it never exceeds 1."""

    def __init__(self) -> None:
        self.writers = 0

    def enter(self, who: str, now: float) -> None:
        self.writers += 1
        assert self.writers == 1, f"{who} writes while another writer holds the lock (t={now:.3f})"

    def leave(self) -> None:
        self.writers -= 1


async def scenario() -> None:
    """Three writers of one record, each writing every 100 / 150 / 250 ms
    for 10 ms, behind one RWLock; a write must be exclusive."""
    loop = asyncio.get_running_loop()
    lock = aiorwlock.RWLock()
    record = _Exclusive()

    async def writer(name: str, every: float) -> None:
        for _ in range(20):
            await asyncio.sleep(every)
            async with lock.writer_lock:
                record.enter(name, loop.time())
                await asyncio.sleep(0.01)  # the write
                record.leave()

    await asyncio.gather(writer("a", 0.1), writer("b", 0.15), writer("c", 0.25))


def on_stock() -> None:
    """On the stock loop: writer A holds the lock until t0, B waits for it,
    C arrives at t0 + 1 ms, and the loop is busy past both (a 30 ms
    blocking call, as on a loaded machine), so it runs both timers in one
    batch, in deadline order: A releases and C acquires before B runs."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        lock = aiorwlock.RWLock()
        record = _Exclusive()
        a_done = loop.create_future()
        c_go = loop.create_future()

        async def a() -> None:
            async with lock.writer_lock:
                record.enter("a", loop.time())
                await a_done
                record.leave()

        async def b() -> None:
            async with lock.writer_lock:
                record.enter("b", loop.time())
                await asyncio.sleep(0.001)
                record.leave()

        async def c() -> None:
            await c_go
            async with lock.writer_lock:
                record.enter("c", loop.time())
                await asyncio.sleep(0.001)
                record.leave()

        ta = asyncio.create_task(a())
        await asyncio.sleep(0)  # A holds the lock
        others = [asyncio.create_task(b()), asyncio.create_task(c())]
        await asyncio.sleep(0)  # B waits for it, C for its moment
        _shared.in_one_batch(partial(a_done.set_result, None), partial(c_go.set_result, None))
        await asyncio.gather(ta, *others)

    asyncio.run(main())
