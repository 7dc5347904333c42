"""What several corpus modules share: the job queue on a Condition of the
two lost-notify bugs (CPython's and anyio's), the users of one lock or
semaphore that give up waiting of the anyio cancelled-waiter bugs, and the
shutdown that cancels a worker of the two swallowed-cancellation bugs
(CPython's wait_for(), async-timeout's).

Each function takes what differs between the libraries (their Condition,
their way to retire a task, their deadline) as a parameter and imports no
library itself: a module's venv has only its own library."""

import asyncio
import collections
import contextlib
import time
from functools import partial

#: Each user's uses of a shared lock or semaphore.
USES = 20


class Jobs:
    """A job queue on a Condition; consumers take one job per wake-up."""

    def __init__(self, cond) -> None:
        self.cond = cond
        # (when it arrived, whether a consumer was idle then)
        self.jobs: collections.deque[tuple[float, bool]] = collections.deque()
        self.idle: list = []  # what retires each idle consumer, longest idle first

    async def put(self, now: float) -> None:
        async with self.cond:
            self.jobs.append((now, bool(self.idle)))
            self.cond.notify(1)

    async def take(self, me) -> tuple[float, bool]:
        """``me`` retires the consumer when cancelled (its task, or the
        cancel scope it runs in)."""
        async with self.cond:
            self.idle.append(me)
            try:
                while not self.jobs:
                    await self.cond.wait()
            finally:
                self.idle.remove(me)
            return self.jobs.popleft()


def own_task() -> contextlib.AbstractContextManager:
    """Retire a consumer by cancelling its task (asyncio's way)."""
    return contextlib.nullcontext(asyncio.current_task())


async def lost_notify_scenario(cond, retirable) -> None:
    """Three consumers take jobs that arrive every 100 ms and take 10 ms
    each; at about t=0.3 s an operator's request to scale the pool down
    arrives (``latency()``: it may arrive a little late) and its handler
    retires the consumer idle longest.  A job must be picked up within 50 ms
    when it arrives while a consumer is idle.  ``cond`` is the Condition
    under test; each consumer runs in ``with retirable() as me``, and ``me``
    is what the handler cancels to retire it."""
    from pywheel import testing

    loop = asyncio.get_running_loop()
    q = Jobs(cond)
    late: list[str] = []

    async def consumer() -> None:
        with retirable() as me:
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


def lost_notify_on_stock(make_cond, retirable) -> None:
    """On the stock loop: a job arrives at t0, the request to retire the
    longest-idle consumer at t0 + 1 ms, and the loop is busy past both (a
    30 ms blocking call, as on a loaded machine), so it runs both timers in
    one batch, in deadline order: the notification goes to the consumer
    being retired.  ``make_cond()`` makes the Condition (inside the loop)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        q = Jobs(make_cond())
        got = loop.create_future()
        retire_handles = []

        async def consumer() -> None:
            with retirable() as me:
                retire_handles.append(me)
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
            retire_handles[0].cancel()  # retire the first consumer

        helpers = [asyncio.create_task(producer()), asyncio.create_task(retire())]
        await asyncio.sleep(0)  # they wait for their moments
        in_one_batch(partial(job_due.set_result, None), partial(retire_due.set_result, None))
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


async def share(primitive, deadlines, give_up_after, uses: int = USES) -> None:
    """One user of ``primitive`` (a lock or semaphore) per deadline: each of
    its ``uses`` holds it 20 ms, waiting at most ``deadline`` s for it
    (inside ``give_up_after(deadline)``), then pauses 15 ms.  Everyone must
    finish within 60 s."""

    async def use(deadline: float) -> None:
        for _ in range(uses):
            with give_up_after(deadline):
                async with primitive:
                    await asyncio.sleep(0.02)  # the request
            await asyncio.sleep(0.015)

    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(use(d) for d in deadlines))
    except TimeoutError:
        raise AssertionError(f"stuck for 60 s; {primitive.statistics()}") from None


def in_one_batch(*callbacks) -> None:
    """The racy moment, by hand, on the stock loop: each callback due 1 ms
    after the one before (the first 1 ms from now), and the loop held busy
    past them all by a 30 ms blocking call, as on a loaded machine, so the
    stock loop runs them in one batch, in that order."""
    loop = asyncio.get_running_loop()
    when = loop.time() + 0.001
    for i, callback in enumerate(callbacks):
        loop.call_at(when + i * 0.001, callback)
    time.sleep(0.03)  # the loop is busy past every deadline


async def stops(worker: asyncio.Task, grace: float, who: str) -> None:
    """Asserts that ``worker``, a task told to stop, ends cancelled within
    ``grace`` s; ``who`` names it in the message."""
    done, _ = await asyncio.wait([worker], timeout=grace)
    assert done, f"{who} still runs {grace} s after it was cancelled"
    assert worker.cancelled(), f"{who} ended with {worker.result()!r}, not cancelled"


async def shutdown_stops(worker: asyncio.Task, *others: asyncio.Task, who: str) -> None:
    """A shutdown request from outside arrives at about t=0.3 s
    (``latency()``: it may arrive a little late) and its handler cancels
    ``worker``, which must stop within 1 s (``stops()``).  Then ``others``
    and ``worker`` are cancelled and waited for (1 s at most)."""
    from pywheel import testing

    async def shutdown_handler() -> None:
        await testing.latency(0.3)  # the shutdown request arrives
        worker.cancel()

    await shutdown_handler()
    try:
        await stops(worker, 1.0, who)
    finally:
        for task in others:
            task.cancel()
        worker.cancel()
        await asyncio.wait([*others, worker], timeout=1.0)
