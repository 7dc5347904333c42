"""Cancelled timeouts under asyncio: the request-timeout pattern.

N concurrent tasks each run `async with timeout(30): await asyncio.sleep(0)`
over and over, so about N timeouts are pending at any moment and almost all
are cancelled, as a server's per-request timeouts are.  The same work runs on:

  stock     asyncio's selector loop with asyncio.timeout
  uvloop    uvloop with asyncio.timeout (skipped if uvloop is not installed)
  wheel     pywheel.asyncio.WheelEventLoop with asyncio.timeout
  helpers   asyncio's selector loop with pywheel.asyncio.timeout

and reports timeouts per second and each one's ratio to stock.

    python -m benchmarks.asyncio_timeouts [--quick] [--json FILE]
"""

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time

import pywheel.asyncio as pwa

try:
    import uvloop
except ImportError:
    uvloop = None


def configs():
    out = [
        ("stock", asyncio.SelectorEventLoop, asyncio.timeout),
        ("uvloop", uvloop.new_event_loop if uvloop else None, asyncio.timeout),
        ("wheel", pwa.new_event_loop, asyncio.timeout),
        ("helpers", asyncio.SelectorEventLoop, pwa.timeout),
    ]
    return [c for c in out if c[1] is not None]


async def workload(n: int, rounds: int, timeout) -> float:
    start = asyncio.Event()

    async def task():
        await start.wait()
        for _ in range(rounds):
            async with timeout(30):
                await asyncio.sleep(0)

    tasks = [asyncio.ensure_future(task()) for _ in range(n)]
    await asyncio.sleep(0)  # every task is waiting on `start`
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    return time.perf_counter() - t0


def measure(factory, timeout, n: int, rounds: int) -> float:
    """Timeouts per second (best of three runs, each on a fresh loop)."""
    best = []
    for _ in range(3):
        gc.collect()
        with asyncio.Runner(loop_factory=factory) as runner:
            elapsed = runner.run(workload(n, rounds, timeout))
        best.append(n * rounds / elapsed)
    return max(best)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="N up to 10,000 only")
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args(argv)
    sizes = [100, 1_000, 10_000] if args.quick else [100, 1_000, 10_000, 100_000]
    results = {}
    names = [c[0] for c in configs()]
    print(f"| N concurrent | {' | '.join(names)} |")
    print(f"|---:|{'---:|' * len(names)}")
    for n in sizes:
        rounds = max(3, 300_000 // n) if not args.quick else max(3, 30_000 // n)
        row = {}
        for name, factory, timeout in configs():
            row[name] = measure(factory, timeout, n, rounds)
        results[n] = row
        base = row["stock"]
        cells = [f"{row[k] / 1e3:,.0f}k/s ({row[k] / base:.2f}x)" for k in names]
        print(f"| {n:,} | {' | '.join(cells)} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": sys.version, "results": results}, f, indent=1)
    ratio = statistics.mean(r["wheel"] / r["stock"] for r in results.values())
    print(f"\nWheelEventLoop / stock, mean over N: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
