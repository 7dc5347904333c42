"""Virtual time: N tasks x 20 sleeps of fake time, side by side.

    python -m benchmarks.virtual_time              # N = 1e3, 1e4, 1e5 (a few minutes)
    python -m benchmarks.virtual_time --quick      # N = 1e3, 1e4
    python -m benchmarks.virtual_time --ns 1e3 --repeat 5

Every implementation runs the same program (each task sleeps 1 ms, 20
times, so the virtual run ends at t = 0.02 s, checked for each; ``--mixed``:
task i sleeps 1..7 ms, end t = 0.14 s) in this one process:

- pywheel.testing.VirtualEventLoop;
- looptime, timeless_loop, trio with ``MockClock(autojump_threshold=0)`` when
  installed (``pip install looptime timeless-loop trio``; skipped otherwise);
- two floors on the stock asyncio loop: the same task steps woken by
  ``sleep(0)`` (no timer at all), and woken by timers that are already due
  (``loop.call_at(0.0, fut.set_result, None); await fut``): the stock loop's
  own cost of a timer-mediated wake-up, without any waiting.

Setup (making the loop and the coroutines), work (running them) and
teardown (closing the loop) are timed apart; the table shows the work, the
best of ``--repeat`` runs (one run at N = 100,000), and each row's ratio to
pywheel.

Then the cost of fuzzing: runs per second of examples/timing_bugs/lease.py
(the fixed twin) on virtual time, alone and as a hypothesis test drawing a
Timing from ``timings(max_late=0.005)`` for each example.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import sys
import time

from .util import machine, perf_ns

SLEEPS = 20
#: Every task sleeps 1 ms twenty times (virtual end t = 0.02 s): all tasks wake
#: in each wave, as in the floors, so the rows compare the same access
#: pattern.  --mixed gives task i 1..7 ms (i % 7), waking a seventh of the
#: tasks, strided through memory, per wave (end t = 0.14 s).
DELAYS = [0.001]
MIXED = [0.001 * (1 + k) for k in range(7)]
END = SLEEPS * DELAYS[-1]


def _delay(i: int) -> float:
    return DELAYS[i % len(DELAYS)]


# ---- asyncio-shaped programs ---------------------------------------------------


async def _sleeper(d: float) -> None:
    sleep = asyncio.sleep
    for _ in range(SLEEPS):
        await sleep(d)


async def _sleep0(d: float) -> None:
    sleep = asyncio.sleep
    for _ in range(SLEEPS):
        await sleep(0)


async def _due_timer(d: float) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(SLEEPS):
        fut = loop.create_future()
        loop.call_at(0.0, fut.set_result, None)
        await fut


def _asyncio_main(n: int, body):
    async def main():
        await asyncio.gather(*[body(_delay(i)) for i in range(n)])
        return asyncio.get_running_loop().time()

    return main


def _run_asyncio(make_loop, n: int, body, expect_end: float | None) -> tuple[float, float, float]:
    gc.collect()
    t0 = perf_ns()
    loop = make_loop()
    main = _asyncio_main(n, body)
    t1 = perf_ns()
    end = loop.run_until_complete(main())
    t2 = perf_ns()
    loop.close()
    t3 = perf_ns()
    if expect_end is not None and abs(end - expect_end) > 1e-6:
        raise AssertionError(f"virtual end time {end!r}, expected {expect_end!r}")
    return (t1 - t0) / 1e9, (t2 - t1) / 1e9, (t3 - t2) / 1e9


def _trio_run(n: int) -> tuple[float, float, float]:
    import trio
    from trio.testing import MockClock

    async def sleeper(d):
        sleep = trio.sleep
        for _ in range(SLEEPS):
            await sleep(d)

    async def main():
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(sleeper, _delay(i))
        return trio.current_time()

    gc.collect()
    t0 = perf_ns()
    clock = MockClock(autojump_threshold=0)
    t1 = perf_ns()
    end = trio.run(main, clock=clock)
    t2 = perf_ns()
    if abs(end - END) > 1e-6:
        raise AssertionError(f"trio: virtual end time {end!r}, expected {END!r}")
    return (t1 - t0) / 1e9, (t2 - t1) / 1e9, 0.0


def implementations() -> list[tuple[str, object]]:
    """(name, run(n) -> (setup, work, teardown)); optional peers when installed."""
    from pywheel.testing import VirtualEventLoop

    # quantum=0: exact readings, as the peers' clocks (they only jump), so
    # every row ends at END (the default quantum costs one addition and a
    # round() per loop iteration on top)
    exact = functools.partial(VirtualEventLoop, quantum=0)
    impls: list[tuple[str, object]] = [
        ("pywheel.testing", lambda n: _run_asyncio(exact, n, _sleeper, END)),
    ]
    try:
        import looptime
    except ImportError:
        print("looptime: not installed, skipped", file=sys.stderr)
    else:
        impls.append(
            ("looptime", lambda n: _run_asyncio(lambda: looptime.new_event_loop(start=0.0), n,
                                                _sleeper, END))
        )  # fmt: skip
    try:
        from timeless_loop import TimelessEventLoop
    except ImportError:
        print("timeless_loop: not installed, skipped", file=sys.stderr)
    else:
        impls.append(("timeless_loop", lambda n: _run_asyncio(TimelessEventLoop, n, _sleeper, END)))
    try:
        import trio  # noqa: F401
    except ImportError:
        print("trio: not installed, skipped", file=sys.stderr)
    else:
        impls.append(("trio MockClock", _trio_run))
    impls.append(
        ("floor: sleep(0), stock loop",
         lambda n: _run_asyncio(asyncio.SelectorEventLoop, n, _sleep0, None))
    )  # fmt: skip
    impls.append(
        ("floor: due timer, stock loop",
         lambda n: _run_asyncio(asyncio.SelectorEventLoop, n, _due_timer, None))
    )  # fmt: skip
    return impls


def measure(
    ns: list[int], repeat: int, only: list[str] | None = None
) -> dict[str, dict[int, float]]:
    results: dict[str, dict[int, float]] = {}
    for n in ns:
        for name, run in implementations():
            keep = name.startswith(("pywheel", "floor"))  # always: the reference and floors
            if only and not keep and not any(o in name for o in only):
                continue
            # Best of `repeat` (one run at N >= 100,000: trio alone takes minutes).
            best = min(run(n)[1] for _ in range(repeat if n < 100_000 else 1))
            results.setdefault(name, {})[n] = best
            print(f"  N={n:>7,} {name:<30} {best:8.3f} s", file=sys.stderr)
    return results


def table(results: dict[str, dict[int, float]], ns: list[int]) -> str:
    ours = results["pywheel.testing"]
    head = "| implementation | " + " | ".join(f"N = {n:,}" for n in ns) + " |"
    rule = "|---|" + "---:|" * len(ns)
    rows = [head, rule]
    for name, by_n in results.items():
        cells = []
        for n in ns:
            s = by_n.get(n)
            if s is None:
                cells.append("–")
            elif name == "pywheel.testing":
                cells.append(f"{s:.3f} s")
            else:
                cells.append(f"{s:.3f} s ({s / ours[n]:.2f}×)")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def fuzz_rate(seconds: float = 3.0) -> tuple[float, float]:
    """Runs/s of the lease example alone, and examples/s under timings()."""
    from hypothesis import HealthCheck, given, settings

    from examples.timing_bugs import lease
    from pywheel import testing

    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        testing.run(lease.scenario(fixed=True))
        n += 1
    plain = n / (time.perf_counter() - t0)

    count = [0]

    @settings(
        max_examples=1000,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(testing.timings(**lease.PERTURB))
    def fuzz(timing):
        testing.run(lease.scenario(fixed=True), timing=timing)
        count[0] += 1

    t0 = time.perf_counter()
    fuzz()
    fuzzed = count[0] / (time.perf_counter() - t0)
    return plain, fuzzed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 1e3, 1e4 only")
    p.add_argument("--ns", help="comma-separated N, e.g. 1e3,1e5")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument(
        "--impl", help="peers to run, e.g. trio,looptime (pywheel and the floors always run)"
    )
    p.add_argument("--mixed", action="store_true", help="task i sleeps 1..7 ms (i % 7)")
    p.add_argument("--no-fuzz", action="store_true", help="skip the examples/second part")
    args = p.parse_args(argv)
    global END
    if args.mixed:
        DELAYS[:] = MIXED
        END = SLEEPS * DELAYS[-1]
    if args.ns:
        ns = [int(float(x)) for x in args.ns.split(",")]
    else:
        ns = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    m = machine()
    sleeps = "1..7 ms" if args.mixed else "1 ms"
    print(f"# Virtual time: N tasks × {SLEEPS} sleeps of {sleeps} (virtual end t = {END:.2f} s)\n")
    print(f"{m['cpu']}, {m['cores']} cores, Python {m['python']}, commit {m['commit']}, "
          f"{m['date']}, load {m['loadavg_start'][0]:.2f}\n")  # fmt: skip
    results = measure(ns, args.repeat, args.impl.split(",") if args.impl else None)
    print(table(results, ns))
    ours = results["pywheel.testing"]
    due = results["floor: due timer, stock loop"]
    peers = [k for k in results if not k.startswith(("floor", "pywheel"))]
    print()
    for n in ns:
        have = [k for k in peers if n in results[k]]
        fastest = min(have, key=lambda k: results[k][n]) if have else None
        line = f"N = {n:,}: {due[n] / ours[n]:.2f}× the due-timer floor's speed"
        if fastest:
            line += f", {results[fastest][n] / ours[n]:.2f}× faster than {fastest}"
        print(line)
    if not args.no_fuzz:
        plain, fuzzed = fuzz_rate()
        print(
            f"\nlease example (fixed twin): {plain:,.0f} runs/s on virtual time; "
            f"{fuzzed:,.0f} examples/s as a hypothesis test with timings(max_late=0.005)"
        )


if __name__ == "__main__":
    main()
