"""A once-a-second job whose schedule drifts when the loop wakes late.

The meter bills once per second by sleeping one second after each bill.  An
auditor checks at t=30.05 that 30 bills went out.  Punctually they do; each
late wake-up pushes every later bill back, and 50 ms of lateness in total
(spread over 30 wake-ups) makes the 30th bill miss the audit.

Fixed twin: sleep until the next whole second (an anchored schedule, like
``pywheel.Wheel.call_every``): lateness no longer accumulates.
"""

import asyncio

PERTURB = {"max_late": 0.005}
PERIOD = 1.0
BILLS = 30


async def scenario(fixed: bool = False) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    bills = []

    async def meter():
        for k in range(1, BILLS + 1):
            if fixed:
                await asyncio.sleep(start + k * PERIOD - loop.time())
            else:
                await asyncio.sleep(PERIOD)
            bills.append(loop.time())

    task = asyncio.create_task(meter())
    await asyncio.sleep(BILLS * PERIOD + 0.05)
    assert len(bills) == BILLS, (
        f"audit at t={loop.time():.3f}: {len(bills)} of {BILLS} bills sent"
        f" (last at t={bills[-1]:.3f})"
    )
    await task
