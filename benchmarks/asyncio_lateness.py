"""How late timeouts fire under asyncio, side by side with the stock loop.

Two workloads, each on every configuration in the same process run:

  server  a loopback TCP server with a per-request timeout (20 ms); clients
          on the same loop keep C connections busy with requests that mostly
          answer at once, and one in 20 waits past its deadline.  Lateness of
          a timeout = loop.time() when the handler catches TimeoutError minus
          the deadline (cm.when()): timer lateness plus getting the task back,
          what a server sees.
  idle    N tasks each waiting under a timeout with a random deadline in
          10-60 ms, nothing else to do: the timer alone.

Configurations:
  stock     asyncio's selector loop, asyncio.timeout
  wheel     pywheel.asyncio.WheelEventLoop, asyncio.timeout
  helpers   asyncio's selector loop, pywheel.asyncio.timeout (the shared wheel)
  uvloop    uvloop, asyncio.timeout (if installed)

The configurations run interleaved, several rounds each, so a busy machine
slows them alike.  Reports p50/p99/max lateness in ms and each p50/p99 as a
ratio to stock's (below 1: earlier than stock), plus requests per second.

    python -m benchmarks.asyncio_lateness [--quick] [--rounds R] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

import pywheel.asyncio as pwa

try:
    import uvloop
except ImportError:
    uvloop = None

TIMEOUT = 0.020


def configs():
    out = [
        ("stock", asyncio.SelectorEventLoop, asyncio.timeout),
        ("wheel", pwa.new_event_loop, asyncio.timeout),
        ("helpers", asyncio.SelectorEventLoop, pwa.timeout),
        ("uvloop", uvloop.new_event_loop if uvloop else None, asyncio.timeout),
    ]
    return [c for c in out if c[1] is not None]


async def server_workload(timeout, conns: int, requests: int) -> tuple[list[float], float]:
    loop = asyncio.get_running_loop()
    late: list[float] = []

    async def handle(reader, writer):
        while line := await reader.readline():
            slow = line.startswith(b"slow")
            try:
                async with timeout(TIMEOUT) as cm:
                    if slow:
                        await asyncio.sleep(1)
                    else:
                        await asyncio.sleep(0)
                writer.write(b"ok\n")
            except TimeoutError:
                late.append(loop.time() - cm.when())
                writer.write(b"timeout\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def client(i: int):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for k in range(requests):
            writer.write(b"slow\n" if (i + k) % 20 == 0 else b"fast\n")
            await writer.drain()
            await reader.readline()
        writer.close()
        await writer.wait_closed()

    t0 = time.perf_counter()
    await asyncio.gather(*[client(i) for i in range(conns)])
    elapsed = time.perf_counter() - t0
    server.close()
    await server.wait_closed()
    return late, conns * requests / elapsed


async def idle_workload(timeout, n: int) -> tuple[list[float], float]:
    loop = asyncio.get_running_loop()
    late: list[float] = []
    rng = random.Random(1)

    async def waiter():
        try:
            async with timeout(rng.uniform(0.010, 0.060)) as cm:
                await loop.create_future()
        except TimeoutError:
            late.append(loop.time() - cm.when())

    await asyncio.gather(*[waiter() for _ in range(n)])
    return late, 0.0


def run(factory, coro):
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests and tasks")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write the raw lateness figures here")
    args = ap.parse_args(argv)
    conns, requests, idle_n = (50, 100, 500) if args.quick else (100, 400, 2000)
    cfgs = configs()
    late = {w: {name: [] for name, *_ in cfgs} for w in ("server", "idle")}
    rps = {name: [] for name, *_ in cfgs}
    for _ in range(args.rounds):
        for name, factory, timeout in cfgs:
            lat, r = run(factory, server_workload(timeout, conns, requests))
            late["server"][name] += lat
            rps[name].append(r)
            lat, _ = run(factory, idle_workload(timeout, idle_n))
            late["idle"][name] += lat
    print(
        f"{args.rounds} rounds; server: {conns} connections x {requests} requests, "
        f"timeout {TIMEOUT * 1000:.0f} ms, 1 in 20 times out; idle: {idle_n} timeouts in 10-60 ms"
    )
    for w in ("server", "idle"):
        print(f"\n{w}: lateness in ms (ratio to stock)")
        print("| loop | timeouts | p50 | p99 | max |" + (" requests/s |" if w == "server" else ""))
        print("|---|---:|---:|---:|---:|" + ("---:|" if w == "server" else ""))
        s50, s99 = pct(late[w]["stock"], 0.5), pct(late[w]["stock"], 0.99)
        for name, *_ in cfgs:
            xs = late[w][name]
            p50, p99 = pct(xs, 0.5), pct(xs, 0.99)
            row = (
                f"| {name} | {len(xs)} | {p50 * 1e3:.3f} ({p50 / s50:.2f}x) "
                f"| {p99 * 1e3:.3f} ({p99 / s99:.2f}x) | {max(xs) * 1e3:.3f} |"
            )
            if w == "server":
                row += f" {statistics.median(rps[name]):,.0f} |"
            print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"late": late, "rps": rps}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
