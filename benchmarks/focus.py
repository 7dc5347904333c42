"""One pywheel workload in a loop, for a profiler to look at.

    python -m benchmarks.focus WHAT [N] [SECONDS]
    perf record -e cpu-clock -g -o perf.data python -m benchmarks.focus cancel 1e6 10
    perf report -i perf.data --stdio --no-children --sort symbol | head -60

WHAT is one of: schedule, pair, cancel, fire, gc, close, stress.  N pending
timers are scheduled first; then the workload repeats for SECONDS (default
10) and its rate is printed.  Bookkeeping between rounds is the same as in
the benchmark (see peers.py), so its symbols (e.g. handle_cancel during a
schedule profile) show up too, separately.
"""

from __future__ import annotations

import gc
import sys
import time

from . import peers as P
from . import workloads as W
from .util import perf_ns


def _rounds(wl: str, n: int, secs: float) -> str:
    peer = P.PyWheel()
    peer.open()
    peer.fill(n)
    k = max(100, min(n // 10, 20_000))
    ops = spent = since_fill = 0
    end = time.monotonic() + secs
    while time.monotonic() < end:
        dt, _ = W._one_round(peer, wl, k, W.GcCounter())
        ops += k
        spent += dt
        since_fill += k
        if wl == "schedule" and since_fill >= n:
            # a schedule round adds k timers whose handles are dropped, and
            # the round's recycling runs out of them after N / k rounds:
            # start again from N, untimed, so that N stays what was asked
            peer.close()
            peer = P.PyWheel()
            peer.open()
            peer.fill(n)
            since_fill = 0
    peer.close()
    return f"{wl} at N={n}: {spent / ops:.1f} ns per op over {ops} ops"


def _fire(n: int, secs: float) -> str:
    rates = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        T = time.monotonic() + 0.1 + n * 2e-6
        r = P.Fire.pywheel(T, [T] * (n - 2), T + 1e-6)
        rates.append(n / ((r["last"] - r["first"]) / 1e9))
    return f"fire at N={n}: best {max(rates) / 1e6:.2f} M callbacks/s over {len(rates)} batches"


def _gc(n: int, secs: float) -> str:
    peer = P.PyWheel()
    peer.open()
    peer.fill(n, keep=False)
    times = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        t = perf_ns()
        gc.collect()
        times.append((perf_ns() - t) / 1e6)
    peer.close()
    return f"gc.collect() with N={n} pending: min {min(times):.1f} ms over {len(times)}"


def _close(n: int, secs: float) -> str:
    per = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        peer = P.PyWheel()
        peer.open()
        peer.fill(n, keep=False)
        t = perf_ns()
        peer.close()
        per.append((perf_ns() - t) / n)
    return f"close() with N={n} pending: min {min(per):.0f} ns per timer over {len(per)}"


def _stress(secs: float) -> str:
    cfg = W.MODES["full"]
    r = W.STRESS_PEERS["pywheel"](cfg, secs, lambda: None, False)
    return (
        f"stress: {r['invocations'] / r['elapsed'] / 1e6:.2f} M invocations/s, "
        f"{r['second_half'] / 1e6:.2f} M/s in the second half"
    )


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    what = argv[0]
    n = int(float(argv[1])) if len(argv) > 1 else 10**6
    secs = float(argv[2]) if len(argv) > 2 else 10.0
    if what in ("schedule", "pair", "cancel"):
        print(_rounds(what, n, secs))
    elif what == "fire":
        print(_fire(n, secs))
    elif what == "gc":
        print(_gc(n, secs))
    elif what == "close":
        print(_close(n, secs))
    elif what == "stress":
        print(_stress(secs))
    else:
        sys.exit(f"unknown workload {what!r}; see --help")


if __name__ == "__main__":
    main(sys.argv[1:])
