"""A reply that usually beats its timeout, against a slow outside world.

The client asks a server for the square of a number, waits 100 ms for the
reply and asks again if none came.  The server answers in 90 ms, so the
timeout never fires punctually.  When a reply is late, the client retries,
and the late reply to the first request is taken as the answer to the
second one: a wrong answer, not a timeout.

Fixed twin: each request carries an id and stale replies are dropped.
"""

import asyncio

from pywheel.testing import call_external

PERTURB = {"max_jitter": 0.03}
SERVER_TIME = 0.09
TIMEOUT = 0.1


class Client:
    def __init__(self, check_ids: bool) -> None:
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.check_ids = check_ids
        self.next_id = 0

    def send(self, x: int) -> int:
        self.next_id += 1
        # The server: replies (request id, x squared) after SERVER_TIME.
        call_external(SERVER_TIME, self.inbox.put_nowait, (self.next_id, x * x))
        return self.next_id

    async def square(self, x: int) -> int:
        for attempt in range(5):
            rid = self.send(x)
            try:
                async with asyncio.timeout(TIMEOUT * 2**attempt):
                    while True:
                        got_id, value = await self.inbox.get()
                        if not self.check_ids or got_id == rid:
                            return value
            except TimeoutError:
                continue
        raise TimeoutError(f"no reply for {x}")


async def scenario(fixed: bool = False) -> None:
    client = Client(check_ids=fixed)
    for x in range(2, 8):
        got = await client.square(x)
        assert got == x * x, f"square({x}) returned {got}"
