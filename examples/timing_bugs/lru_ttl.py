"""A real library: async-lru's ``alru_cache(ttl=...)``, against slow callbacks.

Property: a cached read never returns a value older than the TTL (its age
counted from when the wrapped coroutine produced it).  async-lru starts the
TTL timer in the fetch task's done callback, one callback after the value
was produced, and the expiry is a timer: a read that is ready when that
timer falls due runs first, exactly as on a busy stock loop.  So when
callbacks take time, readers get values older than the TTL (the stale read
its maintainers documented as expected, aio-libs/async-lru#598).

The age is allowed the loop's own iterations on top of the TTL
(``SLACK``, one tick): on virtual time each iteration takes a quantum (10 µs,
as on a real machine), so even a punctual run reads a value one iteration
past its TTL -- the same stale read, at the scale of one iteration, which no
user would call a bug; the fuzz's slow callbacks make it milliseconds.

Fixed twin: the reader checks the age itself and refetches a stale value.
Needs async-lru (the test extra).
"""

import asyncio

from async_lru import alru_cache

PERTURB = {"max_cost": 0.005}
TTL = 1.0
SLACK = 0.001  # one tick: the loop's own iterations (quanta), not a stale value


async def scenario(fixed: bool = False) -> None:
    loop = asyncio.get_running_loop()

    @alru_cache(ttl=TTL)
    async def fetch(key):
        return key, loop.time()  # the value and when it was produced

    async def get(key):
        value = await fetch(key)
        if fixed and loop.time() - value[1] > TTL + SLACK:
            fetch.cache_invalidate(key)
            value = await fetch(key)
        return value

    async def poller(i):
        for _ in range(4):
            await asyncio.sleep(TTL)
            _key, born = await get("config")
            age = loop.time() - born
            assert age <= TTL + SLACK, (
                f"poller {i} got a value {age:.3f} s old at t={loop.time():.3f}"
            )

    pollers = [asyncio.create_task(poller(i)) for i in range(3)]
    await get("config")  # warm the cache
    try:
        await asyncio.gather(*pollers)
    finally:
        fetch.cache_invalidate("config")  # no TTL timer left behind
