"""Command line: plans the units of work, runs them, prints and saves the report."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from . import http_loops as H
from . import loops as L
from . import peers as P
from . import programs as PR
from . import report
from . import workloads as W
from .util import Progress, machine, mem_available

WORKLOADS = [
    "ops",
    "fire",
    "gc",
    "memory",
    "lateness",
    "idle",
    "wakeups",
    "stress",
    "loops",
    "http",
    "programs",
]


def _parse_ns(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def build_plan(
    cfg: W.Config, only: list[str], impls: set[str] | None, notes: list[str], records: list[dict]
):
    """Returns [(label, thunk)], each thunk returning a record or a list of them."""
    plan = []

    def wanted(name: str) -> bool:
        return impls is None or name in impls or name.startswith("floor")

    unavailable = {}
    for cls in P.OP_PEERS:
        why = cls().unavailable()
        if why:
            unavailable[cls.name] = why
            notes.append(f"{cls.name}: skipped everywhere: {why}.")

    def ok(name: str) -> bool:
        return wanted(name) and name not in unavailable

    if "ops" in only:
        for n in cfg.ns:
            for cls in P.OP_PEERS:
                if not ok(cls.name):
                    continue
                if cls.max_n and n > cls.max_n:
                    continue
                plan.append((f"ops {cls.name} N={n:.0e}", lambda c=cls, n=n: W.op_unit(c, n, cfg)))
        for cls in P.OP_PEERS:
            if cls.max_n and any(n > cls.max_n for n in cfg.ns) and ok(cls.name):
                notes.append(f"{cls.name}: measured only up to N={cls.max_n} (a thread per timer).")

    if "fire" in only:
        for spread in (False, True):
            for n in cfg.fire_ns:
                if not spread:
                    plan.append((f"fire floors N={n:.0e}", lambda n=n: W.floor_fire_unit(n)))
                for name, (_, cls) in P.FIRE_PEERS.items():
                    top = cls.max_fire_n or cls.max_n
                    if not ok(name) or (top and n > top):
                        if ok(name) and top and n > top and not spread:
                            notes.append(f"{name}: firing measured only up to N={top:.0e}.")
                        continue

                    def thunk(name=name, n=n, spread=spread, cls=cls):
                        setup = next(
                            (
                                r["ns"]
                                for r in records
                                if r.get("workload") == "setup"
                                and r["impl"] == name
                                and r["n"] == n
                            ),
                            None,
                        )
                        est = (setup or cls.est_fill_ns) * n * 3 / 1e9
                        if est > cfg.fire_budget_s:
                            notes.append(
                                f"{name}: fire at N={n:.0e} skipped (estimated "
                                f"{est:.0f} s > budget {cfg.fire_budget_s:.0f} s)."
                            )
                            return []
                        return W.fire_unit(name, n, spread, cfg, setup)

                    kind = "spread" if spread else "all"
                    plan.append((f"fire {kind} {name} N={n:.0e}", thunk))

    if "gc" in only:
        for shape in W.GC_SHAPES:
            for cls in W.GC_PEERS:
                if ok(cls.name):
                    label = f"gc {cls.name} {shape} N={cfg.gc_n:.0e}"
                    plan.append((label, lambda c=cls, s=shape: W.gc_unit(c, s, cfg)))

    if "memory" in only:
        classes = [c for c in W.MEM_PEERS if ok(c.name)]
        if classes:
            plan.append(("memory (a child process each)", lambda: W.mem_units(classes, cfg)))

    if "lateness" in only:
        for busy in (False, True):
            for name in W.LATE_PEERS:
                if ok(name):
                    label = f"lateness {'busy' if busy else 'idle'} {name}"
                    plan.append((label, lambda nm=name, b=busy: W.late_unit(nm, b, cfg)))

    if "idle" in only:

        def idle_thunk(cls, n):
            prev = [
                r
                for r in records
                if r.get("workload") == "idle" and r["impl"] == cls.name and r["n"] < n
            ]
            if prev:  # this run's cost at the largest N below, a little worse
                r = max(prev, key=lambda r: r["n"])
                fill_ns, close_ns, read_ns = 1.5 * r["setup_ns"], 1.5 * r["teardown_ns"], r["ns"]
            else:
                fill_ns, close_ns, read_ns = cls.est_ns, 0, cls.est_ns
            open_s = (fill_ns * n + read_ns * cfg.idle_reads * (cfg.rounds + 1)) / 1e9
            est = open_s + close_ns * n / 1e9
            why = None
            if est > cfg.idle_budget_s:
                why = f"estimated {est:.0f} s > budget {cfg.idle_budget_s:.0f} s"
            elif cls.est_bytes * n > mem_available() / 2:
                why = f"about {cls.est_bytes * n / 2**30:.1f} GiB > half the available memory"
            elif cls.can_fire and open_s > P.IDLE_TIMEOUT / 2:
                why = (
                    f"fill and reads estimated at {open_s:.0f} s: its timers could fire "
                    f"before the reads end"
                )
            if why:
                notes.append(f"idle: {cls.name} at N={n:.0e} skipped ({why}).")
                return []
            rec = W.idle_unit(cls, n, cfg)
            if rec["fired"]:
                notes.append(f"idle: {rec['fired']} of {cls.name}'s timers fired at N={n:.0e}.")
            return rec

        for n in cfg.idle_ns:
            for cls in P.IDLE_PEERS:
                if ok(cls.family):
                    label = f"idle {cls.name} N={n:.0e}"
                    plan.append((label, lambda c=cls, n=n: idle_thunk(c, n)))

    if "wakeups" in only:
        for name in W.WAKEUP_PEERS:
            if ok(name):
                plan.append((f"wakeups {name}", lambda nm=name: W.wakeup_unit(nm, cfg)))

    if "stress" in only:
        for name in W.STRESS_PEERS:
            if ok(name):
                plan.append((f"stress {name}", lambda nm=name: W.stress_unit(nm, cfg)))

    if "loops" in only:
        plan += L.plan(cfg, ok)
        notes.extend(L.unavailable_notes())
    if "http" in only:  # benchmarks/http_loops.py: aiohttp on loopback, a process per loop
        loops = [n for n in H.LOOPS if impls is None or n in impls]
        if loops:
            plan.append(("http (aiohttp)", lambda: H.http_unit(cfg.mode, loops, notes)))
    if "programs" in only:  # benchmarks/programs.py: whole programs, alternating rounds
        plan += PR.plan(cfg.mode, ok, notes)
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="pywheel against asyncio, uvloop, sched, threading.Timer, a raw heapq "
        "and two floors, side by side in one run.",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small N, under a minute")
    mode.add_argument(
        "--smoke", action="store_true", help="every workload once at tiny N (for the test suite)"
    )
    ap.add_argument("--out", type=Path, help="directory for results.json, results.md, plot.png")
    ap.add_argument("--only", help=f"comma list of workloads: {','.join(WORKLOADS)}")
    ap.add_argument("--impl", help="comma list of implementations (floors always run)")
    ap.add_argument("--ns", help="override N for ops, fire, idle and loops, e.g. 1e3,1e5")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    cfg = W.MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    if args.ns:
        cfg.ns = cfg.fire_ns = cfg.idle_ns = cfg.loops_ns = _parse_ns(args.ns)
    only = args.only.split(",") if args.only else WORKLOADS
    bad = [w for w in only if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s): {', '.join(bad)}")
    impls = set(args.impl.split(",")) if args.impl else None
    if not gc.isenabled():  # pragma: no cover
        gc.enable()

    t_start = time.monotonic()
    info = machine()
    notes: list[str] = []
    records: list[dict] = []
    plan = build_plan(cfg, only, impls, notes, records)
    prog = Progress(len(plan), enabled=not args.no_progress)
    for label, thunk in plan:
        prog.step(label)
        try:
            out = thunk()
        except Exception as e:  # a broken peer must not sink the whole run
            traceback.print_exc(file=sys.stderr)
            notes.append(f"{label}: failed: {e!r}")
            out = []
        records.extend(out if isinstance(out, list) else [out])
    prog.close()
    info["loadavg_end"] = os.getloadavg()
    info["elapsed_s"] = round(time.monotonic() - t_start, 1)
    doc = {
        "machine": info,
        "mode": cfg.mode,
        "config": asdict(cfg),
        "notes": notes,
        "results": records,
    }
    doc["targets"] = report.targets(records, cfg)
    md = report.markdown(doc)
    print(md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(doc, indent=1, default=str))
        (args.out / "results.md").write_text(md)
        msg = report.plot(doc, args.out / "plot.png")
        print(msg, file=sys.stderr)
    return 0
