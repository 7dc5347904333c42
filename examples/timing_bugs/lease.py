"""A lease renewed just before it expires, against a loop that wakes late.

The holder renews 2 ms before the lease's 10 s TTL runs out, which always
works on an idle machine.  A loop that wakes 2 ms late for the renewal finds
the expiry timer (due at 10.000) due as well: timers run in deadline order,
the renewal's task step after them, and the lease is gone.

Fixed twin: renew at half the TTL.
"""

import asyncio

PERTURB = {"max_late": 0.005}
TTL = 10.0
MARGIN = 0.002


class LeaseLost(AssertionError):
    pass


class LeaseServer:
    def __init__(self) -> None:
        self.lost = False
        self._expiry = None

    def grant(self) -> None:
        """Grants the lease, or extends it by TTL from now."""
        loop = asyncio.get_running_loop()
        if self.lost:
            raise LeaseLost(f"renewal at t={loop.time():.3f}, after the lease expired")
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = loop.call_later(TTL, self._expire)

    def _expire(self) -> None:
        self.lost = True


async def hold(server: LeaseServer, renew_every: float, rounds: int) -> None:
    server.grant()
    for _ in range(rounds):
        await asyncio.sleep(renew_every)
        server.grant()


async def scenario(fixed: bool = False) -> None:
    server = LeaseServer()
    await hold(server, TTL / 2 if fixed else TTL - MARGIN, rounds=6 if fixed else 3)
