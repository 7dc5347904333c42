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
import collections
import time

from . import dist_version

REF = "python/cpython#112202 (fixed by PR #112201)"
BUGGY = ("3.12", None)
FIXED = ("3.13", None)
PROMISE = "a job is picked up at once while a consumer is idle"


def installed() -> str:
    return dist_version(None)


class _Jobs:
    """A job queue on a Condition; consumers take one job per wake-up."""

    def __init__(self) -> None:
        self.cond = asyncio.Condition()
        # (when it arrived, whether a consumer was idle then)
        self.jobs: collections.deque[tuple[float, bool]] = collections.deque()
        self.idle: list[asyncio.Task] = []  # longest idle first

    async def put(self, now: float) -> None:
        async with self.cond:
            self.jobs.append((now, bool(self.idle)))
            self.cond.notify(1)

    async def take(self) -> tuple[float, bool]:
        async with self.cond:
            me = asyncio.current_task()
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
    retires the consumer idle longest.  A job must be picked up within 50 ms when it
    arrives while a consumer is idle."""
    from pywheel import testing

    loop = asyncio.get_running_loop()
    q = _Jobs()
    late: list[str] = []

    async def consumer() -> None:
        while True:
            born, idle = await q.take()
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

        async def consumer() -> None:
            item = await q.take()
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
            first.cancel()

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
