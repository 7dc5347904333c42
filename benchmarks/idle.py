"""Idle timeouts: N connections, each with a 30 s timeout pushed back on
every read (the workload timing wheels exist for).  Each "read" resets the
timeout of a random connection; nothing fires during the run.  Side by side
in one process:

  pywheel reschedule      handle.reschedule_later(30) on a ManualWheel
  pywheel cancel+new      handle.cancel(); wheel.call_later(30, ...)
  asyncio cancel+new      TimerHandle.cancel(); loop.call_later(30, ...)
  asyncio Timeout         asyncio.Timeout.reschedule(loop.time() + 30)
  uvloop cancel+new       the same on uvloop (if installed)
  floor                   a C call of the same arity (list.__setitem__)

Reported in ns per read and as ratios: to asyncio's best way and to the floor.

    python -m benchmarks.idle [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import time

import pywheel

try:
    import uvloop
except ImportError:
    uvloop = None

READS = 200_000


def nop():
    pass


def _timed(fn, reads):
    gc.collect()
    t = time.perf_counter_ns()
    fn(reads)
    return (time.perf_counter_ns() - t) / len(reads)


def pywheel_reschedule(n, reads):
    w = pywheel.ManualWheel()
    hs = [w.call_later(30, nop) for _ in range(n)]

    def run(reads):
        for i in reads:
            hs[i].reschedule_later(30)

    ns = _timed(run, reads)
    w.close()
    return ns


def loop_cancel_new(new_loop):
    """cancel() then call_later(): on an event loop, or on a ManualWheel."""

    def bench(n, reads):
        loop = new_loop()
        hs = [loop.call_later(30, nop) for _ in range(n)]
        call_later = loop.call_later

        def run(reads):
            for i in reads:
                hs[i].cancel()
                hs[i] = call_later(30, nop)

        ns = _timed(run, reads)
        loop.close()
        return ns

    return bench


def asyncio_timeout(n, reads):
    async def main():
        loop = asyncio.get_running_loop()
        ts = []
        for _ in range(n):
            t = asyncio.Timeout(loop.time() + 30)
            await t.__aenter__()  # entered, as inside `async with`
            ts.append(t)

        def run(reads):
            for i in reads:
                ts[i].reschedule(loop.time() + 30)

        ns = _timed(run, reads)
        for t in ts:
            t.reschedule(None)
        return ns

    return asyncio.run(main())


def floor(n, reads):
    xs = [0] * n
    setitem = xs.__setitem__

    def run(reads):
        for i in reads:
            setitem(i, 30)

    return _timed(run, reads)


def peers():
    out = [
        ("pywheel reschedule", pywheel_reschedule),
        ("pywheel cancel+new", loop_cancel_new(pywheel.ManualWheel)),
        ("asyncio cancel+new", loop_cancel_new(asyncio.SelectorEventLoop)),
        ("asyncio Timeout", asyncio_timeout),
    ]
    if uvloop:
        out.append(("uvloop cancel+new", loop_cancel_new(uvloop.new_event_loop)))
    out.append(("floor (C call)", floor))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N up to 1e5, one round")
    args = ap.parse_args()
    sizes = [1_000, 10_000, 100_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
    rounds = 1 if args.quick else 3
    rng = random.Random(1)
    print(f"{'N':>9}  {'peer':<20} {'ns/read':>8}  {'vs asyncio best':>15}  {'vs floor':>8}")
    for n in sizes:
        reads = [rng.randrange(n) for _ in range(READS)]
        res = {name: min(fn(n, reads) for _ in range(rounds)) for name, fn in peers()}
        best = min(v for k, v in res.items() if k.startswith(("asyncio", "uvloop")))
        for name, ns in res.items():
            print(
                f"{n:>9,}  {name:<20} {ns:>8.0f}  {best / ns:>14.1f}x  "
                f"{ns / res['floor (C call)']:>7.1f}x"
            )


if __name__ == "__main__":
    main()
