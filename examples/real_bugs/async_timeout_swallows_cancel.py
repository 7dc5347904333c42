"""async-timeout: a cancellation that arrives just after the timeout fired
comes out as TimeoutError, so the task goes on running.

Upstream: aio-libs/async-timeout issue #229 ("aiohttp swallows
asyncio.CancelledError during connection timeout"); PR #230 fixed the
cancel-before-timeout order only, and 4.0.x kept raising TimeoutError for a
cancel that lands after the timeout; 5.0 (on Python 3.11+) makes
``async_timeout.timeout`` asyncio's own ``timeout()``, which counts
cancellations (``Task.uncancel()``) and lets the outside one through.
Buggy: async-timeout 4.0.3; fixed: async-timeout 5.0.1 (both on 3.11).

When the timeout's callback has cancelled the task and, before the task
runs, someone else cancels it too, 4.0.3's ``__aexit__`` sees its own
timeout expired and raises TimeoutError: a caller that treats a timeout as
"try again" never sees that it was told to stop.
"""

import asyncio
import time

import async_timeout

from . import _shared, dist_version

REF = "aio-libs/async-timeout#229 (partial fix PR #230; fixed in 5.0 on 3.11+)"
BUGGY = (None, "async-timeout==4.0.3")
FIXED = (None, "async-timeout==5.0.1")
PROMISE = "a cancelled task stops (task.cancel() is not turned into a timeout)"


def installed() -> str:
    return dist_version("async-timeout")


async def scenario() -> None:
    """A poller calls a remote service every 100 ms; a call usually takes
    40 ms and is given up after 50 ms (async_timeout.timeout), then retried
    at the next poll.  A shutdown request from outside arrives at about
    t=0.3 s and its handler cancels the poller, which must stop."""
    from pywheel import testing

    async def poller() -> None:
        while True:
            await asyncio.sleep(0.1)
            try:
                async with async_timeout.timeout(0.05):
                    await testing.latency(0.04)  # the remote call
            except TimeoutError:
                pass  # slow this time: try at the next poll

    worker = asyncio.create_task(poller())
    await _shared.shutdown_stops(worker, who="the poller")


def on_stock() -> None:
    """On the stock loop: the call's timeout is due at t0 and the shutdown
    at t0 + 1 ms, and the loop is busy past both (a blocking call, as on a
    loaded machine), so it runs both in one batch: both cancel the
    poller before it runs again."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + 0.5  # ample for the set-up, even on a loaded machine
        entered = loop.create_future()

        async def poller() -> None:
            while True:
                try:
                    async with async_timeout.timeout_at(when):
                        if not entered.done():
                            entered.set_result(None)
                        await asyncio.sleep(1.0)  # the remote call, slow
                except TimeoutError:
                    await asyncio.sleep(0.01)  # retry

        worker = asyncio.create_task(poller())
        await entered  # its timeout is scheduled: the shutdown goes after it
        loop.call_at(when + 0.001, worker.cancel)
        time.sleep(max(0.0, when - loop.time()) + 0.01)  # busy past both deadlines
        await asyncio.sleep(0)
        try:
            await _shared.stops(worker, 0.5, "the poller")
        finally:
            worker.cancel()

    asyncio.run(main())
