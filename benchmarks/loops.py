"""The `loops` workload: event loops side by side, as asyncio users meet them.

Per loop, in one run: ``call_later`` + ``cancel`` pairs with N timers
pending (ns per pair, the method bound once before the clock starts as in
every other workload); the RSS each pending timer adds (a fresh child
process per loop); and a sleep storm, T tasks each awaiting S times
``asyncio.sleep(0.001)``.  The loops: stock asyncio, uvloop (if importable),
``WheelEventLoop``, ``pywheel.uvloop`` (if importable), and, for the pairs
and the memory, the WheelEventLoop's own wheel called directly (the floor
the loop's methods are judged against).

    python -m benchmarks --only loops [--quick]
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import time
from collections import deque

from . import peers as P
from .util import nop


def _import_pywheel_uvloop():
    import pywheel.uvloop

    return pywheel.uvloop


class WheelLoop(P._RandomPool):
    """WheelEventLoop through its own call_later."""

    name = "WheelEventLoop"
    est_fill_ns = 1500

    def open(self):
        import pywheel.asyncio

        super().open()
        self.loop = pywheel.asyncio.new_event_loop()

    def method(self):
        return self.loop.call_later

    def fill(self, n, keep=True, callbacks=None):
        hs = map(self.method(), P.fill_delays(n), callbacks or itertools.repeat(nop))
        self.hs.extend(hs) if keep else deque(hs, maxlen=0)

    def close(self):
        self.loop.close()
        self.hs = []

    def pending(self):
        return len(self.loop.wheel)

    def schedule(self, delays):
        return P.time_schedule(self.method(), delays)

    def pair(self, delays):
        return P.time_pair(self.method(), delays)


class WheelLoopDirect(WheelLoop):
    """The same loop's wheel, called directly: loop.wheel.call_later."""

    name = "its wheel, direct"

    def method(self):
        return self.loop.wheel.call_later


class PywheelUvloop(P.UvLoop):
    """pywheel.uvloop: uvloop's I/O, pywheel's timers."""

    name = "pywheel.uvloop"

    def unavailable(self):
        try:
            _import_pywheel_uvloop()
        except ImportError as e:
            return f"pywheel.uvloop not importable ({e})"
        return None

    def new_loop(self):
        return _import_pywheel_uvloop().new_event_loop()


def _stock_factory():
    return asyncio.SelectorEventLoop()


def _uvloop_factory():
    import uvloop

    return uvloop.new_event_loop()


def _wheel_factory():
    import pywheel.asyncio

    return pywheel.asyncio.new_event_loop()


def _pywheel_uvloop_factory():
    return _import_pywheel_uvloop().new_event_loop()


#: (peer class for pairs and memory, loop factory for the storm), in table order
LOOPS = [
    (P.AsyncioLoop, _stock_factory),
    (P.UvLoop, _uvloop_factory),
    (WheelLoop, _wheel_factory),
    (PywheelUvloop, _pywheel_uvloop_factory),
    (WheelLoopDirect, None),
]
ORDER = [cls.name for cls, _ in LOOPS]
STOCK, WHEEL_LOOP, DIRECT = P.AsyncioLoop.name, WheelLoop.name, WheelLoopDirect.name


def pair_unit(cls, n: int, cfg) -> dict:
    """ns per call_later + cancel pair with n timers pending (median of rounds)."""
    from .workloads import _rounds

    peer = cls()
    gc.collect()
    peer.open()
    peer.fill(n)
    k = max(cfg.k_min, min(n // 10, cfg.k_max))
    rec = {"workload": "loops_pair", "impl": peer.name, "n": n, **_rounds(peer, "pair", k, cfg)}
    peer.close()
    del peer
    gc.collect()
    return rec


class _WheelLoopSwitched(WheelLoop):
    """One WheelEventLoop timed through either its call_later or its wheel's."""

    direct = False

    def method(self):
        return self.loop.wheel.call_later if self.direct else self.loop.call_later


def ratio_unit(n: int, cfg) -> dict:
    """WheelEventLoop's call_later + cancel over its own wheel's, on one loop
    with n pending, in alternating rounds (ABBA), each round as pair_unit's:
    the two costs come from the same moments of a shared machine, where
    pair_unit's medians of separate runs can be taken seconds apart.  The
    target is the median of the per-round-pair ratios."""
    from .workloads import GcCounter, _one_round

    peer = _WheelLoopSwitched()
    gc.collect()
    peer.open()
    peer.fill(n)
    k = max(cfg.k_min, min(n // 10, cfg.k_max))
    g = GcCounter()
    ns: dict[bool, list[float]] = {False: [], True: []}
    for direct in (False, True):  # warm-up
        peer.direct = direct
        _one_round(peer, "pair", k, g)
    for i in range(max(3 * cfg.rounds, 3)):
        for direct in (False, True) if i % 2 == 0 else (True, False):
            peer.direct = direct
            dt, _ = _one_round(peer, "pair", k, g)
            ns[direct].append(dt / k)
    peer.close()
    ratios = sorted(a / b for a, b in zip(ns[False], ns[True], strict=True))
    return {
        "workload": "loops_ratio",
        "impl": WheelLoop.name,
        "n": n,
        "k": k,
        "ratio": ratios[len(ratios) // 2],
        "ratios": [round(r, 3) for r in ratios],
        "loop_ns": [round(x, 2) for x in ns[False]],
        "wheel_ns": [round(x, 2) for x in ns[True]],
        **g.as_dict(),
    }


def mem_unit(classes, cfg) -> list[dict]:
    """RSS (and traced bytes) per pending timer: a child process per loop."""
    from .workloads import mem_units

    out = mem_units(classes, dataclasses.replace(cfg, mem_n=cfg.loops_mem_n))
    for r in out:
        r["workload"] = "loops_memory"
    return out


async def _storm(tasks: int, sleeps: int) -> float:
    start = asyncio.Event()

    async def task():
        await start.wait()
        for _ in range(sleeps):
            await asyncio.sleep(0.001)

    ts = [asyncio.ensure_future(task()) for _ in range(tasks)]
    await asyncio.sleep(0)  # every task waits on `start`
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*ts)
    return time.perf_counter() - t0


def storm_unit(name: str, factory, cfg) -> dict:
    """Seconds for the storm (tasks started, then timed from `start` to the
    last sleep), on a fresh loop; best of cfg.storm_runs."""
    best = None
    for _ in range(cfg.storm_runs):
        gc.collect()
        with asyncio.Runner(loop_factory=factory) as runner:
            s = runner.run(_storm(cfg.storm_tasks, cfg.storm_sleeps))
        best = s if best is None else min(best, s)
    return {
        "workload": "loops_storm",
        "impl": name,
        "tasks": cfg.storm_tasks,
        "sleeps": cfg.storm_sleeps,
        "s": best,
        "sleeps_per_s": cfg.storm_tasks * cfg.storm_sleeps / best,
    }


def plan(cfg, ok) -> list:
    """[(label, thunk)] for run.build_plan; ok(name) says whether a loop runs."""
    out = []
    usable = [(cls, f) for cls, f in LOOPS if ok(cls.name) and not cls().unavailable()]
    ratio = any(cls is WheelLoop for cls, _ in usable)
    for n in cfg.loops_ns:
        for cls, _ in usable:
            out.append(
                (f"loops pair {cls.name} N={n:.0e}", lambda c=cls, n=n: pair_unit(c, n, cfg))
            )
        if ratio:
            out.append(
                (
                    f"loops ratio WheelEventLoop / its wheel N={n:.0e}",
                    lambda n=n: ratio_unit(n, cfg),
                )
            )
    mem = [cls for cls, _ in usable]
    if mem:
        out.append(("loops memory (a child process each)", lambda: mem_unit(mem, cfg)))
    for cls, factory in usable:
        if factory is not None:
            out.append(
                (f"loops storm {cls.name}", lambda c=cls, f=factory: storm_unit(c.name, f, cfg))
            )
    return out


def unavailable_notes() -> list[str]:
    return [
        f"loops: {cls.name} skipped: {why}."
        for cls, _ in LOOPS
        if cls not in P.OP_PEERS and (why := cls().unavailable())
    ]


# ---------------------------------------------------------------------------
# report


def _n(n: int) -> str:
    e = len(str(n)) - 1
    return f"1e{e}" if n == 10**e else f"{n:,}"


def _get(records, workload, impl, n=None, key="ns"):
    for r in records:
        if (
            r.get("workload") == workload
            and r.get("impl") == impl
            and (n is None or r.get("n") == n)
            and r.get(key) is not None
        ):
            return r[key]
    return None


def targets(records) -> list[tuple[str, str, bool | None]]:
    """(target, measured, ok) rows: WheelEventLoop's pair ≤ 1.5× its wheel's."""
    ns = sorted({r["n"] for r in records if r.get("workload") == "loops_pair"})
    cells, oks = [], []
    for n in ns:
        if n not in (10**3, 10**5):
            continue
        # the interleaved measurement where the run has it, else the medians
        r = _get(records, "loops_ratio", WHEEL_LOOP, n, key="ratio")
        if r is None:
            a = _get(records, "loops_pair", WHEEL_LOOP, n)
            b = _get(records, "loops_pair", DIRECT, n)
            if a is None or not b:
                continue
            r = a / b
        cells.append(f"N={_n(n)}: {r:.2f}×")
        oks.append(r <= 1.5)
    if not ns:
        return []
    label = "WheelEventLoop call_later+cancel ≤ 1.5× its own wheel's, N=1e3 and 1e5"
    if not cells:
        return [(label, "not measured (N=1e3 and 1e5 not in this run)", None)]
    return [(label, ", ".join(cells), all(oks))]


def markdown(records, fmt) -> list[str]:
    """The "Loops" section: one column per loop, ratios to stock asyncio."""
    pairs = [r for r in records if r.get("workload") == "loops_pair"]
    mem = [r for r in records if r.get("workload") == "loops_memory"]
    storm = [r for r in records if r.get("workload") == "loops_storm"]
    if not (pairs or mem or storm):
        return []
    # every loop has its column, "–" where it was not importable
    impls = ORDER

    def cell(x, base, unit):
        if x is None:
            return "–"
        s = fmt(x, unit)
        if base and x is not base:
            s += f" ({x / base:.2f}×)"
        return s

    rows = []
    for n in sorted({r["n"] for r in pairs}):
        base = _get(records, "loops_pair", STOCK, n)
        rows.append(
            [f"call_later + cancel, {_n(n)} pending"]
            + [cell(_get(records, "loops_pair", i, n), base, " ns") for i in impls]
        )
    if mem:
        base = _get(records, "loops_memory", STOCK, key="rss_bytes")
        rows.append(
            ["RSS per pending timer"]
            + [cell(_get(records, "loops_memory", i, key="rss_bytes"), base, " B") for i in impls]
        )
    if storm:
        r0 = storm[0]
        base = _get(records, "loops_storm", STOCK, key="s")
        rows.append(
            [f"{r0['tasks']:,} tasks × {r0['sleeps']} sleeps(0.001)"]
            + [cell(_get(records, "loops_storm", i, key="s"), base, " s") for i in impls]
        )
    head = "| | " + " | ".join(impls) + " |"
    sep = "|---|" + "---:|" * len(impls)
    lines = [head, sep] + ["| " + " | ".join(r) + " |" for r in rows]
    ratio = []
    for n in sorted({r["n"] for r in pairs}):
        a, b = _get(records, "loops_pair", WHEEL_LOOP, n), _get(records, "loops_pair", DIRECT, n)
        if a and b:
            ratio.append(f"N={_n(n)}: {a / b:.2f}×")
    alt = sorted((r for r in records if r.get("workload") == "loops_ratio"), key=lambda r: r["n"])
    alternating = [
        f"N={_n(r['n'])}: {r['ratio']:.2f}× "
        f"(round pairs from {min(r['ratios']):.2f}× to {max(r['ratios']):.2f}×)"
        for r in alt
    ]
    return [
        "## Loops: the event loops side by side",
        "",
        *lines,
        "",
        "Ratios in brackets are to stock asyncio. call_later + cancel: ns per pair, the "
        "method bound once, median of the rounds. RSS: a fresh child process per loop. "
        "The storm: seconds from the start signal to the last sleep, best of the runs."
        + (f" WheelEventLoop / its wheel called directly: {', '.join(ratio)}." if ratio else "")
        + (
            " The same ratio in alternating rounds on one loop (median of "
            f"{len(alt[0]['ratios'])} round pairs; the target's figure): "
            f"{', '.join(alternating)}."
            if alternating
            else ""
        ),
        "",
    ]
