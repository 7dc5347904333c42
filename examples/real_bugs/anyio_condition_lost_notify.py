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

import asyncio
import collections
import time

import anyio

from . import dist_version

REF = "agronholm/anyio#1075 (fix released in 4.13.0)"
BUGGY = (None, "anyio==4.12.1")
FIXED = (None, "anyio==4.13.0")
PROMISE = "a job is picked up at once while a consumer is idle"


def installed() -> str:
    return dist_version("anyio")


class _Jobs:
    """A job queue on an anyio.Condition; consumers take one job per wake-up."""

    def __init__(self) -> None:
        self.cond = anyio.Condition()
        # (when it arrived, whether a consumer was idle then)
        self.jobs: collections.deque[tuple[float, bool]] = collections.deque()
        self.idle: list[anyio.CancelScope] = []  # longest idle first

    async def put(self, now: float) -> None:
        async with self.cond:
            self.jobs.append((now, bool(self.idle)))
            self.cond.notify(1)

    async def take(self, me: anyio.CancelScope) -> tuple[float, bool]:
        """Called inside ``me``, the consumer's scope: cancelling it retires
        the consumer (anyio's way to stop a task)."""
        async with self.cond:
            self.idle.append(me)
            try:
                while not self.jobs:
                    await self.cond.wait()
            finally:
                self.idle.remove(me)
            return self.jobs.popleft()


async def scenario() -> None:
    """Three consumers take jobs that arrive every 100 ms and take 10 ms
    each; at about t=0.3 s an operator's request to scale the pool down
    arrives (``latency()``: it may arrive a little late) and its handler
    retires the consumer idle longest (cancels its scope).  A job must be
    picked up within 50 ms when it arrives while a consumer is idle."""
    from pywheel import testing

    loop = asyncio.get_running_loop()
    q = _Jobs()
    late: list[str] = []

    async def consumer() -> None:
        with anyio.CancelScope() as me:
            while True:
                born, idle = await q.take(me)
                waited = loop.time() - born
                if idle and waited > 0.05:
                    late.append(f"a job waited {waited:.3f} s at t={loop.time():.3f}")
                await asyncio.sleep(0.01)  # the work

    async def producer() -> None:
        for _ in range(30):
            await asyncio.sleep(0.1)
            await q.put(loop.time())

    consumers = [asyncio.create_task(consumer()) for _ in range(3)]

    async def scale_down_handler() -> None:
        await testing.latency(0.3)  # the request arrives
        if q.idle:
            q.idle[0].cancel()

    try:
        await asyncio.gather(producer(), scale_down_handler())
        await asyncio.sleep(0.5)
    finally:
        for c in consumers:
            c.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
    assert not late, "; ".join(late)


def on_stock() -> None:
    """On the stock loop: a job arrives at t0, the request to retire the
    longest-idle consumer at t0 + 1 ms, and the loop is busy past both (a
    30 ms blocking call, as on a loaded machine), so it runs both timers in
    one batch, in deadline order: the notification goes to the consumer
    being retired."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        q = _Jobs()
        got = loop.create_future()

        scopes = []

        async def consumer() -> None:
            with anyio.CancelScope() as me:
                scopes.append(me)
                item = await q.take(me)
                if not got.done():
                    got.set_result(item)

        first = asyncio.create_task(consumer())
        await asyncio.sleep(0)
        second = asyncio.create_task(consumer())
        await asyncio.sleep(0)  # both wait, first at the head
        job_due = loop.create_future()
        retire_due = loop.create_future()

        async def producer() -> None:
            await job_due
            await q.put(loop.time())

        async def retire() -> None:
            await retire_due
            scopes[0].cancel()  # retire the first consumer

        helpers = [asyncio.create_task(producer()), asyncio.create_task(retire())]
        await asyncio.sleep(0)  # they wait for their moments
        when = loop.time() + 0.001
        loop.call_at(when, job_due.set_result, None)
        loop.call_at(when + 0.001, retire_due.set_result, None)
        time.sleep(0.03)  # the loop is busy past both deadlines
        try:
            await asyncio.wait_for(asyncio.shield(got), 0.5)
        except TimeoutError:
            raise AssertionError(
                f"a job waits with a consumer idle: {len(q.jobs)} queued, {len(q.idle)} idle"
            ) from None
        finally:
            for t in (first, second, *helpers):
                t.cancel()
            await asyncio.gather(first, second, *helpers, return_exceptions=True)

    asyncio.run(main())
