"""python -m pywheel: the wheel at work beside asyncio's loop, in one run.

Schedules, cancels and fires the same number of timers on a pywheel.Wheel and
on a fresh asyncio event loop, and prints what each step cost.  The figures
are per timer, measured here and now; benchmarks/ has the careful version.
"""

import argparse
import asyncio
import gc
import threading
import time
import tracemalloc

import pywheel

last_stats: dict = {}


def noop() -> None:
    pass


def per_op(seconds: float, n: int) -> float:
    return seconds / n * 1e9


def measure_schedule_cancel(schedule, n: int) -> tuple[float, float, list]:
    t0 = time.perf_counter()
    handles = [schedule(30.0 + i * 1e-6, noop) for i in range(n)]
    t1 = time.perf_counter()
    for h in handles:
        h.cancel()
    t2 = time.perf_counter()
    return per_op(t1 - t0, n), per_op(t2 - t1, n), handles


def measure_gc(schedule, n: int) -> float:
    handles = [schedule(30.0, noop) for _ in range(n)]
    gc.collect()
    t0 = time.perf_counter()
    gc.collect()
    elapsed = time.perf_counter() - t0
    for h in handles:
        h.cancel()
    return elapsed * 1e3


def measure_memory(schedule, n: int) -> float:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    handles = [schedule(30.0, noop) for _ in range(n)]
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    per = (used - len(handles) * 8) / n  # not counting the demo's own list
    for h in handles:
        h.cancel()
    return per


def wheel_fire(n: int) -> float:
    """Seconds to run n callbacks that all fall due at the same moment."""
    global last_stats
    with pywheel.Wheel() as wheel:
        done = threading.Event()
        count = [0]

        def hit() -> None:
            count[0] += 1
            if count[0] == n:
                done.set()

        when = wheel.time() + 0.2
        for _ in range(n):
            wheel.call_at(when, hit)
        done.wait(60)
        finished = wheel.time()
        assert count[0] == n
        last_stats = wheel.stats()
        return finished - when


def asyncio_fire(loop: asyncio.AbstractEventLoop, n: int) -> float:
    count = [0]
    finished = [0.0]

    def hit() -> None:
        count[0] += 1
        if count[0] == n:
            finished[0] = loop.time()
            loop.stop()

    when = loop.time() + 0.2
    for _ in range(n):
        loop.call_at(when, hit)
    loop.run_forever()
    assert count[0] == n
    return finished[0] - when


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m pywheel", description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200_000, help="timers per step (default 200000)")
    args = parser.parse_args(argv)
    n = args.n

    # Every step gets a fresh wheel and a fresh loop, so that no step pays
    # for what an earlier one left behind (asyncio keeps cancelled handles).
    steps = [
        ("schedule: call_later()", lambda s: measure_schedule_cancel(s, n)[0], "ns/timer"),
        ("cancel: handle.cancel()", lambda s: measure_schedule_cancel(s, n)[1], "ns/timer"),
        ("gc.collect() with n pending", lambda s: measure_gc(s, n), "ms"),
        ("memory per pending timer", lambda s: measure_memory(s, n), "bytes"),
    ]
    rows = []
    for name, step, unit in steps:
        with pywheel.Wheel() as wheel:
            w = step(wheel.call_later)
        loop = asyncio.new_event_loop()
        try:
            a = step(loop.call_later)
        finally:
            loop.close()
        rows.append((name, w, a, unit))
    loop = asyncio.new_event_loop()
    try:
        wf, af = wheel_fire(n), asyncio_fire(loop, n)
    finally:
        loop.close()
    rows.insert(2, ("fire: all due at once", per_op(wf, n), per_op(af, n), "ns/timer"))

    print(f"pywheel {pywheel.__version__} beside asyncio, n = {n:,} timers per step\n")
    print(f"{'step':30} {'pywheel':>12} {'asyncio':>12}   {'asyncio/pywheel':>15}")
    for name, w, a, unit in rows:
        ratio = a / w if w > 0 else float("inf")
        print(f"{name:30} {w:12.1f} {a:12.1f}   {ratio:14.1f}x  ({unit})")
    st = last_stats
    print(
        f"\nfiring {n:,} due timers: the wheel thread handed them out in "
        f"{st['batches']} batches of at most {st['max_batch']:,}, the first as soon as it "
        f"was gathered; lateness p50 {st['late_p50'] * 1e3:.2f} ms, "
        f"p99 {st['late_p99'] * 1e3:.2f} ms, max {st['late_max'] * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
