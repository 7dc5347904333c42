"""A periodic job that must not overlap its next run, against a slow outside
world.

Every 100 ms a sync job starts; it makes a remote call that takes 80 ms.
Punctually each run ends 20 ms before the next begins.  When the remote end
is slower than usual, two runs overlap and both write the same batch.

Fixed twin: the next run is scheduled when the previous one ends (sleep
for what is left of the period), so runs never overlap.
"""

import asyncio

from pywheel.testing import latency

PERTURB = {"max_jitter": 0.03}
PERIOD = 0.1
REMOTE = 0.08
RUNS = 10


async def scenario(fixed: bool = False) -> None:
    loop = asyncio.get_running_loop()
    running = 0
    done = 0

    async def sync_job():
        nonlocal running, done
        running += 1
        assert running == 1, f"two sync runs at once at t={loop.time():.3f}"
        await latency(REMOTE)  # the remote call
        running -= 1
        done += 1

    if fixed:
        for _ in range(RUNS):
            began = loop.time()
            await sync_job()
            await asyncio.sleep(max(0.0, began + PERIOD - loop.time()))
    else:
        jobs = []
        for _ in range(RUNS):
            jobs.append(asyncio.create_task(sync_job()))
            await asyncio.sleep(PERIOD)
        await asyncio.gather(*jobs)
    assert done == RUNS
