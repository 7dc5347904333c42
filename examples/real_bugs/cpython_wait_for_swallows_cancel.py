"""CPython asyncio: ``wait_for()`` swallows a cancellation that arrives as
the awaited operation completes.

Upstream: python/cpython issue #86296 (bpo-42130, "AsyncIO's wait_for can
hide cancellation in a rare race condition"); fixed by reimplementing
``wait_for()`` on ``asyncio.timeout()`` (python/cpython PR #98518), first
released in 3.12.0 and not backported.  Buggy: CPython 3.11; fixed: 3.12.

3.11's ``wait_for()`` waits on a helper future; when the task running it is
cancelled, it checks whether the inner operation is done by now and, if so,
returns its result.  When the operation's completion and the cancellation
land in the same loop iteration (operation first), the task never sees the
cancellation: a worker that is told to stop takes the next item instead.
"""

import asyncio
import time

from . import _shared, dist_version

REF = "python/cpython#86296 (fixed by PR #98518)"
BUGGY = ("3.11", None)
FIXED = ("3.12", None)
PROMISE = "a cancelled task stops (task.cancel() is not lost)"


def installed() -> str:
    return dist_version(None)


async def scenario() -> None:
    """A consumer takes jobs with wait_for(queue.get(), 1.0) (a timeout is
    its idle heartbeat); a producer queues a job every 100 ms; a shutdown
    request from outside arrives at about t=0.3 s (``latency()``: it may
    arrive a little late) and its handler cancels the consumer, which must
    stop."""
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def consumer() -> None:
        while True:
            try:
                await asyncio.wait_for(queue.get(), 1.0)
            except TimeoutError:
                pass  # idle: nothing to do

    async def producer() -> None:
        for i in range(1000):
            await asyncio.sleep(0.1)
            queue.put_nowait(i)

    prod = asyncio.create_task(producer())
    worker = asyncio.create_task(consumer())
    await _shared.shutdown_stops(worker, prod, who="the worker")


def on_stock() -> None:
    """On the stock loop: a job arrives at t0 and the shutdown at t0 + 1 ms,
    and the loop is busy past both (a 30 ms blocking call, as on a loaded
    machine), so it runs both timers in one batch, in deadline order."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int] = asyncio.Queue()

        async def consumer() -> None:
            while True:
                await asyncio.wait_for(queue.get(), 1.0)

        worker = asyncio.create_task(consumer())
        await asyncio.sleep(0)  # the consumer waits in wait_for()
        when = loop.time() + 0.001
        loop.call_at(when, queue.put_nowait, 1)
        stopped = loop.create_future()
        loop.call_at(when + 0.001, stopped.set_result, None)
        time.sleep(0.03)  # the loop is busy past both deadlines
        await stopped
        worker.cancel()
        try:
            await _shared.stops(worker, 0.5, "the worker")
        finally:
            worker.cancel()

    asyncio.run(main())
