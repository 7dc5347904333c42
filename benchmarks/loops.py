"""The `loops` workload: event loops side by side, as asyncio users meet them.

Per loop, in one run: ``call_later`` + ``cancel`` pairs with N timers
pending (ns per pair, the method bound once before the clock starts as in
every other workload); the RSS each pending timer adds (a fresh child
process per loop); and a sleep storm, T tasks each awaiting S times
``asyncio.sleep(0.001)``.  The loops: stock asyncio, uvloop, rloop,
``WheelEventLoop``, ``pywheel.uvloop``, ``pywheel.rloop`` (each optional one
skipped with a note where it does not import), and, for the pairs
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


def _import_pywheel_rloop():
    # pywheel.rloop (rloop's loop with pywheel's timers) is picked up as soon
    # as it imports; until then its rows are skipped with a note
    import pywheel.rloop

    return pywheel.rloop


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


class RLoop(P.UvLoop):
    """rloop (an asyncio loop written in Rust): its own call_later.  One loop
    iteration between rounds, untimed, as for uvloop: harmless where a
    cancelled timer is freed at once, fair where it waits for the loop."""

    name = "rloop"
    est_fill_ns = 3000
    # rloop 0.5 keeps every cancelled timer's callback, arguments and context
    # alive after its loop closes (116,000 objects after one pair unit at
    # 1e5 pending): its pair units run in a child process (pair_unit_child),
    # or every later unit in this process would pay for collecting them
    leaks_cancelled = True

    def unavailable(self):
        try:
            import rloop  # noqa: F401
        except ImportError:
            return "rloop not importable (pip install rloop, or the bench extra)"
        return None

    def new_loop(self):
        import rloop

        return rloop.new_event_loop()


class PywheelRloop(RLoop):
    """pywheel.rloop: rloop's I/O, pywheel's timers."""

    name = "pywheel.rloop"

    def unavailable(self):
        try:
            _import_pywheel_rloop()
        except ImportError as e:
            return f"pywheel.rloop not importable ({e})"
        return None

    def new_loop(self):
        return _import_pywheel_rloop().new_event_loop()


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


def _rloop_factory():
    import rloop

    return rloop.new_event_loop()


def _pywheel_rloop_factory():
    return _import_pywheel_rloop().new_event_loop()


#: (peer class for pairs and memory, loop factory for the storm), in table order
LOOPS = [
    (P.AsyncioLoop, _stock_factory),
    (P.UvLoop, _uvloop_factory),
    (RLoop, _rloop_factory),
    (WheelLoop, _wheel_factory),
    (PywheelUvloop, _pywheel_uvloop_factory),
    (PywheelRloop, _pywheel_rloop_factory),
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
    k = _pair_k(n, cfg)
    rec = {"workload": "loops_pair", "impl": peer.name, "n": n, **_rounds(peer, "pair", k, cfg)}
    peer.close()
    del peer
    gc.collect()
    return rec


def pair_unit_child(cls, n: int, cfg) -> dict:
    """pair_unit in a fresh interpreter, for a loop that leaves garbage
    behind after it is closed (RLoop.leaks_cancelled)."""
    import json

    from .util import json_child

    code = (
        "import json, sys; from benchmarks import loops, workloads as W; "
        "cfg = W.Config(**json.loads(sys.argv[1])); "
        "cls = getattr(loops, sys.argv[2], None) or getattr(loops.P, sys.argv[2]); "
        "print(json.dumps(loops.pair_unit(cls, int(sys.argv[3]), cfg)))"
    )
    args = [json.dumps(dataclasses.asdict(cfg)), cls.__name__, str(n)]
    return json_child(["-c", code, *args], f"{cls.name} pair", timeout=1800)


class _WheelLoopSwitched(WheelLoop):
    """One WheelEventLoop timed through either its call_later or its wheel's."""

    direct = False

    def method(self):
        return self.loop.wheel.call_later if self.direct else self.loop.call_later


def _abba(one_round, cfg) -> tuple[list[float], list[float]]:
    """ns per op of side False and side True, timed by one_round(side) in
    alternating rounds (ABBA) after a warm-up round of each: the two costs
    come from the same moments of a shared machine, where pair_unit's
    medians of separate runs can be taken seconds apart."""
    ns: dict[bool, list[float]] = {False: [], True: []}
    for side in (False, True):
        one_round(side)
    for i in range(max(3 * cfg.rounds, 3)):
        for side in (False, True) if i % 2 == 0 else (True, False):
            ns[side].append(one_round(side))
    return ns[False], ns[True]


def _pair_k(n: int, cfg) -> int:
    return max(cfg.k_min, min(n // 10, cfg.k_max))


def _pair_round(peer, k: int, reps: int, g) -> float:
    """ns per pair of one ratio round: the pair rounds' bookkeeping (k
    random pending timers replaced, so N stays pending), then k pairs timed
    `reps` times over.  A pair leaves N pending, so a round can time more
    pairs than the N // 10 a round may replace: at N = 1e3 a round of 100
    pairs lasts 10-50 us, where one interruption moved a round pair's ratio
    from 2.7x to 0.7x."""
    peer.release(peer.take(k))
    delays = P.PAIR_DELAYS[:k]
    with g:
        dt = sum(peer.pair(delays) for _ in range(reps))
    peer.after_pairs(k)
    peer.fill(k)
    return dt / (k * reps)


def _ratio_record(workload, impl, n, k, reps, g, **sides: list[float]) -> dict:
    """The record of an _abba measurement: the two sides' ns per pair (the
    first keyword over the second: ratio, the median of the per-round-pair
    ratios, and all of them sorted) and the collector's counts."""
    (a, b) = sides.values()
    ratios = sorted(x / y for x, y in zip(a, b, strict=True))
    return {
        "workload": workload,
        "impl": impl,
        "n": n,
        "k": k,
        "reps": reps,
        "ratio": ratios[len(ratios) // 2],
        "ratios": [round(r, 3) for r in ratios],
        **{name: [round(x, 2) for x in ns] for name, ns in sides.items()},
        **g.as_dict(),
    }


def ratio_unit(n: int, cfg) -> dict:
    """WheelEventLoop's call_later + cancel over its own wheel's, on one loop
    with n pending, in alternating rounds (_abba), each round _pair_round's.
    The target is the median of the per-round-pair ratios."""
    from .workloads import GcCounter

    peer = _WheelLoopSwitched()
    gc.collect()
    peer.open()
    peer.fill(n)
    k = _pair_k(n, cfg)
    reps = -(-cfg.k_max // k)
    g = GcCounter()

    def one(direct: bool) -> float:
        peer.direct = direct
        return _pair_round(peer, k, reps, g)

    loop_ns, wheel_ns = _abba(one, cfg)
    peer.close()
    return _ratio_record(
        "loops_ratio", WheelLoop.name, n, k, reps, g, loop_ns=loop_ns, wheel_ns=wheel_ns
    )


def uv_ratio_unit(n: int, cfg) -> dict:
    """How many times faster pywheel.uvloop's call_later + cancel is than
    uvloop's: a loop of each with n pending, timed in alternating rounds
    (_abba), each round _pair_round's; the target is the median of the
    per-round-pair speed-ups (uvloop's ns over pywheel.uvloop's)."""
    from .workloads import GcCounter

    peers = {False: P.UvLoop(), True: PywheelUvloop()}
    gc.collect()
    for peer in peers.values():
        peer.open()
        peer.fill(n)
    k = _pair_k(n, cfg)
    reps = -(-cfg.k_max // k)
    g = GcCounter()
    uv_ns, pw_ns = _abba(lambda side: _pair_round(peers[side], k, reps, g), cfg)
    for peer in peers.values():
        peer.close()
    return _ratio_record(
        "loops_uv_ratio",
        PywheelUvloop.name,
        n,
        k,
        reps,
        g,
        uvloop_ns=uv_ns,
        pywheel_uvloop_ns=pw_ns,
    )


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
    # uvloop against pywheel.uvloop, where both import (PywheelUvloop needs both)
    uv_ratio = any(cls is PywheelUvloop for cls, _ in usable) and any(
        cls is P.UvLoop for cls, _ in usable
    )
    for n in cfg.loops_ns:
        for cls, _ in usable:
            out.append(
                (
                    f"loops pair {cls.name} N={n:.0e}",
                    lambda c=cls, n=n: (
                        pair_unit_child if getattr(c, "leaks_cancelled", False) else pair_unit
                    )(c, n, cfg),
                )
            )
        if ratio:
            out.append(
                (
                    f"loops ratio WheelEventLoop / its wheel N={n:.0e}",
                    lambda n=n: ratio_unit(n, cfg),
                )
            )
        if uv_ratio:
            out.append(
                (
                    f"loops ratio uvloop / pywheel.uvloop N={n:.0e}",
                    lambda n=n: uv_ratio_unit(n, cfg),
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


def _target(records, label, alt, num, den, ok) -> list[tuple[str, str, bool | None]]:
    """One (target, measured, ok) row at N=1e3 and 1e5: the alternating
    rounds' ratio (workload `alt`, impl `alt[1]`) where the run has it, else
    the loops_pair medians num / den."""
    ns = sorted({r["n"] for r in records if r.get("workload") == "loops_pair"})
    if not ns:
        return []
    cells, oks = [], []
    for n in ns:
        if n not in (10**3, 10**5):
            continue
        r = _get(records, alt[0], alt[1], n, key="ratio")
        if r is None:
            a, b = _get(records, "loops_pair", num, n), _get(records, "loops_pair", den, n)
            if a is None or not b:
                continue
            r = a / b
        cells.append(f"N={_n(n)}: {r:.2f}×")
        oks.append(ok(r))
    if not cells:
        return [(label, "not measured (N=1e3 and 1e5 not in this run)", None)]
    return [(label, ", ".join(cells), all(oks))]


def targets(records) -> list[tuple[str, str, bool | None]]:
    """(target, measured, ok) rows: WheelEventLoop's pair ≤ 1.5× its wheel's;
    pywheel.uvloop's ≥ 3× faster than uvloop's (where both ran)."""
    rows = _target(
        records,
        "WheelEventLoop call_later+cancel ≤ 1.5× its own wheel's, N=1e3 and 1e5",
        ("loops_ratio", WHEEL_LOOP),
        WHEEL_LOOP,
        DIRECT,
        lambda r: r <= 1.5,
    )
    pairs = {r.get("impl") for r in records if r.get("workload") == "loops_pair"}
    if {P.UvLoop.name, PywheelUvloop.name} <= pairs:
        rows += _target(
            records,
            "pywheel.uvloop call_later+cancel ≥ 3× faster than uvloop's, N=1e3 and 1e5",
            ("loops_uv_ratio", PywheelUvloop.name),
            P.UvLoop.name,
            PywheelUvloop.name,
            lambda r: r >= 3,
        )
    return rows


def _alternating(records, workload) -> tuple[list[dict], list[str]]:
    """An _abba workload's records by N, and a cell for each."""
    recs = sorted((r for r in records if r.get("workload") == workload), key=lambda r: r["n"])
    return recs, [
        f"N={_n(r['n'])}: {r['ratio']:.2f}× "
        f"(round pairs from {min(r['ratios']):.2f}× to {max(r['ratios']):.2f}×)"
        for r in recs
    ]


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
    alt, alternating = _alternating(records, "loops_ratio")
    uv_alt, uv_alternating = _alternating(records, "loops_uv_ratio")
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
        )
        + (
            " pywheel.uvloop's pair against uvloop's, a loop of each timed in alternating "
            f"rounds (uvloop's ns over pywheel.uvloop's, median of {len(uv_alt[0]['ratios'])} "
            f"round pairs; the target's figure): {', '.join(uv_alternating)}."
            if uv_alternating
            else ""
        ),
        "",
    ]
