"""A watchdog over slow steps, against slow callbacks.

A worker handles items in batches of 20, yielding to the loop after each
item, and reports progress once per batch.  A watchdog checks every 50 ms
that progress was reported in the last 30 ms and otherwise declares the
worker hung.  Punctually the work takes no time at all; when each step
takes a couple of milliseconds (a busy CPU), a healthy worker is killed.

Fixed twin: report progress after every item, so the watchdog measures one
step, not a batch.
"""

import asyncio

PERTURB = {"max_cost": 0.002}
BATCH = 20
BATCHES = 5
CHECK_EVERY = 0.05
HUNG_AFTER = 0.03


async def scenario(fixed: bool = False) -> None:
    loop = asyncio.get_running_loop()
    last_progress = loop.time()
    finished = False

    async def worker():
        nonlocal last_progress, finished
        for _batch in range(BATCHES):
            for _item in range(BATCH):
                await asyncio.sleep(0)  # one item's work, then yield
                if fixed:
                    last_progress = loop.time()
            last_progress = loop.time()
            await asyncio.sleep(0.01)  # wait for the next batch
        finished = True

    async def watchdog():
        while not finished:
            await asyncio.sleep(CHECK_EVERY)
            silent = loop.time() - last_progress
            assert finished or silent <= HUNG_AFTER, (
                f"watchdog at t={loop.time():.3f}: no progress for {silent:.3f} s, "
                f"worker declared hung"
            )

    await asyncio.gather(worker(), watchdog())
