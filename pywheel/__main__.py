"""python -m pywheel: the wheel at work beside asyncio's loop, round after round.

Schedules, cancels and fires the same number of timers on a pywheel.Wheel and
on a fresh asyncio event loop, in several rounds (pywheel and asyncio take
turns going first), and prints each figure's median and its range over the
rounds, with the machine's CPU count and load: the figures are measured here
and now and move with the machine.  benchmarks/ has the careful version.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pywheel

Schedule = Callable[..., Any]

# (key, label): the rows of the table, in order.
ROWS = [
    ("schedule", "call_later(), ns/timer"),
    ("cancel", "cancel(), ns/timer"),
    ("fire", "fire all due, ns/timer"),
    ("gc", "gc.collect(), ms"),
    ("memory", "memory, bytes/timer"),
]
WHAT = """\
call_later(): n timers scheduled; cancel(): each cancelled; fire all due: n
timers due at one moment, from the deadline to the last callback's end;
gc.collect(): one full collection with n pending; memory: traced by
tracemalloc, per pending timer."""
SIDES = ("pywheel", "asyncio")


def noop() -> None:
    pass


def per_op(seconds: float, n: int) -> float:
    return seconds / n * 1e9


def measure_schedule_cancel(schedule: Schedule, n: int) -> dict[str, float]:
    t0 = time.perf_counter()
    handles = [schedule(30.0 + i * 1e-6, noop) for i in range(n)]
    t1 = time.perf_counter()
    for h in handles:
        h.cancel()
    t2 = time.perf_counter()
    return {"schedule": per_op(t1 - t0, n), "cancel": per_op(t2 - t1, n)}


def measure_gc(schedule: Schedule, n: int) -> dict[str, float]:
    handles = [schedule(30.0, noop) for _ in range(n)]
    gc.collect()
    t0 = time.perf_counter()
    gc.collect()
    elapsed = time.perf_counter() - t0
    for h in handles:
        h.cancel()
    return {"gc": elapsed * 1e3}


def measure_memory(schedule: Schedule, n: int) -> dict[str, float]:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    handles = [schedule(30.0, noop) for _ in range(n)]
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    per = (used - len(handles) * 8) / n  # not counting the demo's own list
    for h in handles:
        h.cancel()
    return {"memory": per}


def wheel_fire(n: int) -> dict[str, Any]:
    """n callbacks that all fall due at one moment, on a Wheel: the cost per
    callback (from the deadline to the last one's end), how late the first
    one started (the first batch), and the wheel's stats()."""
    with pywheel.Wheel() as wheel:
        done = threading.Event()
        count = [0]
        first = [0.0]

        def hit() -> None:
            count[0] += 1
            if count[0] == n:
                done.set()

        def first_hit() -> None:
            first[0] = wheel.time()
            hit()

        when = wheel.time() + 0.2
        # Equal deadlines run in the order they were scheduled: first_hit
        # is the first callback of the first batch.
        wheel.call_at(when, first_hit)
        for _ in range(n - 1):
            wheel.call_at(when, hit)
        done.wait(60)
        finished = wheel.time()
        assert count[0] == n
        return {
            "fire": per_op(finished - when, n),
            "first_late": first[0] - when,
            "stats": wheel.stats(),
        }


def asyncio_fire(n: int) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    try:
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
        return {"fire": per_op(finished[0] - when, n)}
    finally:
        loop.close()


def on_fresh(side: str, measure: Callable[[Schedule, int], dict[str, float]], n: int):
    """measure() on a fresh Wheel or a fresh asyncio loop, so that no step pays
    for what an earlier one left behind (asyncio keeps cancelled handles)."""
    if side == "pywheel":
        with pywheel.Wheel() as wheel:
            return measure(wheel.call_later, n)
    loop = asyncio.new_event_loop()
    try:
        return measure(loop.call_later, n)
    finally:
        loop.close()


def one_round(n: int, order: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Every step once on each side, the sides taking turns in this order."""
    out: dict[str, dict[str, Any]] = {side: {} for side in SIDES}
    for measure in (measure_schedule_cancel, measure_gc, measure_memory):
        for side in order:
            out[side].update(on_fresh(side, measure, n))
    for side in order:
        out[side].update(wheel_fire(n) if side == "pywheel" else asyncio_fire(n))
    return out


def number(x: float, like: float) -> str:
    """x with as many decimals as suit a figure of like's size."""
    digits = 0 if like >= 100 else 1 if like >= 1 else 2
    return f"{x:,.{digits}f}"


def median(values: list[float], suffix: str = "") -> str:
    med = statistics.median(values)
    return number(med, med) + suffix


def span(values: list[float]) -> str:
    """'(min-max)' of values, with the median's decimals."""
    med = statistics.median(values)
    return f"({number(min(values), med)}-{number(max(values), med)})"


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (OSError, AttributeError):  # none to read, or none at all (Windows)
        return "unknown"


def cpus() -> str:
    total = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        usable = total
    return f"{total} CPUs" if usable == total else f"{usable} of {total} CPUs usable"


def positive(text: str) -> int:
    value = int(text.replace("_", "").replace(",", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pywheel",
        description=__doc__.split("\n")[0].split(": ", 1)[1],
        epilog="A quick look, in about a second: python -m pywheel --n 10000 --rounds 2",
    )
    # The defaults keep the run short (8.6 s of CPU on a 2-core VM, measured
    # at load 5; 200,000 timers took 21 s): the README's first command runs it.
    parser.add_argument(
        "-n", "--n", type=positive, default=100_000, help="timers per step (default 100000)"
    )
    parser.add_argument(
        "--rounds",
        type=positive,
        default=5,
        help="rounds of every step on both sides; the figures are the median "
        "and the range over them (default 5)",
    )
    args = parser.parse_args(argv)
    n, rounds = args.n, args.rounds

    print(
        f"pywheel {pywheel.__version__} beside asyncio's loop: "
        f"{platform.python_implementation()} {platform.python_version()}, {cpus()}"
    )
    print(
        f"n = {n:,} timers per step, {rounds} round{'s' if rounds > 1 else ''}, "
        "pywheel and asyncio alternating"
    )
    print(f"load average (1, 5, 15 min): {load()}", end="", flush=True)
    started = time.perf_counter()
    results = []
    for r in range(rounds):
        results.append(one_round(n, SIDES if r % 2 == 0 else SIDES[::-1]))
    took = time.perf_counter() - started
    print(f"; {load()} after {took:.1f} s")

    def column(side: str, key: str) -> list[float]:
        return [res[side][key] for res in results]

    print()
    if rounds > 1:
        print(f"each figure: its median over the {rounds} rounds, under it (min-max)")
    else:
        print("each figure: one round's (--rounds 2 or more shows a spread)")
    print(f"{'':24}{'pywheel':>14}{'asyncio':>16}{'asyncio/pywheel':>20}")
    for key, label in ROWS:
        w, a = column("pywheel", key), column("asyncio", key)
        ratios = [y / x if x > 0 else float("inf") for x, y in zip(w, a, strict=True)]
        print(f"{label:24}{median(w):>14}{median(a):>16}{median(ratios, 'x'):>20}")
        if rounds > 1:
            print(f"{'':24}{span(w):>14}{span(a):>16}{span(ratios):>20}")
    print()
    print(WHAT)

    stats = [res["pywheel"]["stats"] for res in results]
    first_ms = [res["pywheel"]["first_late"] * 1e3 for res in results]
    last_ms = [s["late_max"] * 1e3 for s in stats]
    fewest, most = min(s["batches"] for s in stats), max(s["batches"] for s in stats)
    count = f"{fewest:,}" if fewest == most else f"{fewest:,} to {most:,}"
    biggest = max(s["max_batch"] for s in stats)
    tick_ms = stats[0]["tick"] * 1e3
    print()
    print(f"Lateness of the wheel's callbacks, {n:,} due at one moment (tick {tick_ms:g} ms),")
    print(
        f"handed out by the wheel thread in {count} batch{'es' if most > 1 else ''} "
        f"of at most {biggest:,}:"
    )
    first = median(first_ms) + (f" ms late {span(first_ms)}" if rounds > 1 else " ms late")
    print(f"- first batch: started {first}; the promise is at most")
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        print(f"  one tick ({tick_ms:g} ms) plus the wait for the GIL", end="")
        print(" (and for a CPU, on a busy machine)")
    else:  # free-threaded, the GIL off: the wheel's thread attaches, waits for nobody
        print(f"  one tick ({tick_ms:g} ms) plus the wait for a CPU, on a busy machine")
        print("  (this build runs without the GIL)")
    if most > 1:
        last = median(last_ms) + (f" ms late {span(last_ms)}" if rounds > 1 else " ms late")
        print("- later batches wait for the earlier ones to run: the last started")
        print(f"  {last}, the time the callbacks before it took to run")


if __name__ == "__main__":
    main()
