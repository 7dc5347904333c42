"""The gc workload in rounds, pywheel and asyncio interleaved, least of all.

    python -m benchmarks.gc_rounds [ROUNDS] [SHAPES]

ROUNDS (default 5) rounds, each running workloads.gc_unit (the `gc` workload
of ``python -m benchmarks``: best of 3 full collections with nothing pending,
then with N=1e6 pending) for each callback shape (``shared,bound``) on
pywheel then asyncio.  Per pair it takes the least baseline and the least
full collection over all rounds: on a shared machine a round that another
process disturbed only ever adds time, so the least is the figure.
"""

from __future__ import annotations

import sys

from . import peers as P
from . import workloads as W


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 5
    shapes = argv[1].split(",") if len(argv) > 1 else list(W.GC_SHAPES)
    impls = [P.PyWheel, P.AsyncioLoop]
    cfg = W.MODES["full"]
    base: dict = {}
    full: dict = {}
    for r in range(rounds):
        for shape in shapes:
            for cls in impls:
                rec = W.gc_unit(cls, shape, cfg)
                k = (cls.name, shape)
                base[k] = min(base.get(k, rec["baseline_ms"]), rec["baseline_ms"])
                full[k] = min(full.get(k, rec["collect_ms"]), rec["collect_ms"])
                print(
                    f"round {r} {cls.name} {shape}: nothing pending {rec['baseline_ms']:.2f} ms, "
                    f"N pending {rec['collect_ms']:.2f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    print("| callbacks | pywheel: nothing pending → N pending | added | asyncio | added | ratio |")
    print("|---|---|---|---|---|---|")
    for shape in shapes:
        a, b = ("pywheel", shape), ("asyncio", shape)
        aa, bb = full[a] - base[a], full[b] - base[b]
        print(
            f"| {shape} | {base[a]:.2f} → {full[a]:.2f} ms | +{aa:.1f} ms | "
            f"{base[b]:.2f} → {full[b]:.2f} ms | +{bb:.1f} ms | {100 * aa / bb:.1f} % |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
