"""psycopg_pool: a request cancelled just as the pool hands it a connection
swallows the cancellation and carries on with the connection.

Upstream: psycopg/psycopg issue #1275 ("``WaitingClient.wait()`` can still
return a connection after ``CancelledError``"), fixed by PR #1277 in
psycopg-pool 3.3.1.  Buggy: psycopg-pool 3.3.0; fixed: 3.3.1 (both with the
psycopg of the day; no PostgreSQL is needed: the pool is given an
in-process connection class).

A request that finds the pool empty queues a ``WaitingClient`` and waits on
its condition.  A connection coming back is given to the first client:
``set()`` stores it and notifies.  If the client's task is cancelled in the
same loop iteration, before it runs (its deadline fell due in that batch),
``wait()`` catches the CancelledError and records it -- then 3.3.0 checks
``self.conn`` first and returns the connection: the cancellation is lost
and the request runs on past its deadline.  3.3.1 lets the error win and
gives the connection back to the pool.
"""

import asyncio
import time

import psycopg_pool
from psycopg.pq import TransactionStatus

from . import dist_version

REF = "psycopg/psycopg#1275 (fixed by PR #1277)"
# On CPython 3.12: on 3.11 the pool's wait (``asyncio.wait_for()`` around
# ``Condition.wait()``) loses the same cancellation in 3.11's own wait_for()
# (python/cpython#86296, see cpython_wait_for_swallows_cancel), so 3.3.1 --
# and 3.3.3, which waits the same way -- fail there too: the fuzz found it
# on 3.3.1 under 3.11 after 35 examples, its Timing inside 3.11's wait_for();
# likely what psycopg/psycopg#1345 reports as a residual race on 3.3.1.
BUGGY = ("3.12", "psycopg-pool==3.3.0 psycopg==3.3.2")
FIXED = ("3.12", "psycopg-pool==3.3.1 psycopg==3.3.2")
PROMISE = "a request that runs out of time stops; it is not handed a connection"


def installed() -> str:
    return dist_version("psycopg-pool")


class _PgConn:
    transaction_status = TransactionStatus.IDLE


class _Connection:
    """Just enough of psycopg.AsyncConnection for the pool: always idle,
    never broken, no server behind it."""

    def __init__(self) -> None:
        self.pgconn = _PgConn()
        self.closed = False
        self.broken = False
        self.autocommit = False
        self._pool = None

    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs) -> "_Connection":
        return cls()

    async def __aenter__(self) -> "_Connection":
        return self

    async def __aexit__(self, *exc) -> None:
        pass

    async def close(self) -> None:
        self.closed = True
        self.pgconn.transaction_status = TransactionStatus.UNKNOWN


def _pool() -> psycopg_pool.AsyncConnectionPool:
    return psycopg_pool.AsyncConnectionPool(
        "", connection_class=_Connection, min_size=1, max_size=1, open=False
    )


async def _request(pool, deadline: float, work: float) -> None:
    """One request: a connection within ``deadline`` s, held ``work`` s.
    Past its deadline it must end with TimeoutError (an asyncio.timeout()
    that expired cancelled the task inside the block, so the block cannot
    end normally unless the cancellation was lost)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(deadline) as cm:
            async with pool.connection():
                await asyncio.sleep(work)
    except TimeoutError:
        return
    assert not cm.expired(), f"a request ran on past its deadline (t={loop.time():.3f})"


# With max_late=0.005 (the corpus's bounds before they became timings()'s
# defaults) the fuzz missed this one (389 examples, 0 found): the race
# needs a release due at most max_late before the deadline of a request
# still waiting.  With three handlers a request waits at most two
# uses (40 ms) of its 50 ms, so that gap is 10 ms, closed only by five or
# more slow steps in a row; a fourth handler (or 25 ms uses) makes the
# deadline tie exactly with a release, and the punctual run fails.  The
# pool also reads time.monotonic() for its own waits (30 s, never reached).
async def scenario() -> None:
    """Three request handlers share a pool of one connection; each request
    must be done in 50 ms (asyncio.timeout) and uses the connection 20 ms;
    each handler's requests (10) arrive from its client 15 ms after it
    answered the last (``latency()``: they may arrive a little late).  A
    request that runs out of time must end with TimeoutError."""
    from pywheel import testing

    pool = _pool()
    await pool.open(wait=True)

    async def handler() -> None:
        for _ in range(10):
            await testing.latency(0.015)  # the next request arrives
            await _request(pool, 0.05, 0.02)

    try:
        await asyncio.gather(handler(), handler(), handler())
    finally:
        await pool.close()


def on_stock() -> None:
    """On the stock loop: A holds the pool's one connection until t0, B
    waits for it with a deadline at t0 + 1 ms, and the loop is busy past
    both (a 30 ms blocking call, as on a loaded machine), so it runs both
    timers in one batch, in deadline order: A gives the connection back
    (the pool hands it to B) and B's deadline cancels B before B has run."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pool = _pool()
        await pool.open(wait=True)
        a_done = loop.create_future()

        async def a() -> None:
            async with pool.connection():
                await a_done

        ta = asyncio.create_task(a())
        await asyncio.sleep(0.001)  # A holds the connection
        when = loop.time() + 0.001
        tb = asyncio.create_task(_request(pool, when + 0.001 - loop.time(), 0.001))
        await asyncio.sleep(0)  # B waits for it
        loop.call_at(when, a_done.set_result, None)
        time.sleep(0.03)  # the loop is busy past both deadlines
        try:
            await asyncio.gather(ta, tb)
        finally:
            await pool.close()

    asyncio.run(main())
