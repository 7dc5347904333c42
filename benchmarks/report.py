"""Markdown tables, the targets checked against this run, and the plot."""

from __future__ import annotations

from pathlib import Path

from . import loops, programs
from .workloads import INTERVAL as STRESS_INTERVAL

PW = "pywheel"
FLOOR_C = "floor: C call"
FLOOR_PY = "floor: Py call from C"
ORDER = [FLOOR_C, FLOOR_PY, PW, "asyncio", "uvloop", "sched", "heapq tuples", "threading.Timer"]


GC_SHAPES = {"shared": "one shared function", "bound": "a bound method per timer"}

# the idle-timeout rows (benchmarks.peers.IDLE_PEERS' names), in table order
IDLE_RESCHEDULE = "pywheel reschedule"
IDLE_ASYNCIO = ("asyncio cancel+new", "asyncio Timeout")
IDLE_ORDER = [
    FLOOR_C,
    IDLE_RESCHEDULE,
    "WheelEventLoop reschedule",
    "pywheel cancel+new",
    *IDLE_ASYNCIO,
    "uvloop cancel+new",
]


def _recs(records, workload, impl=None, n=None):
    return [
        r
        for r in records
        if r.get("workload") == workload
        and (impl is None or r.get("impl") == impl)
        and (n is None or r.get("n") == n)
    ]


def _get(records, workload, impl, n=None, key="ns"):
    for r in _recs(records, workload, impl, n):
        if r.get(key) is not None:
            return r[key]
    return None


def _impls(records, workload, order=ORDER):
    seen = {r["impl"] for r in _recs(records, workload)}
    return [i for i in order if i in seen] + sorted(seen - set(order))


def _idle_best_asyncio(records, n):
    """asyncio's best way at N: the cheaper of cancel+new and Timeout."""
    xs = [_get(records, "idle", a, n) for a in IDLE_ASYNCIO]
    xs = [x for x in xs if x is not None]
    return min(xs) if xs else None


def _ns_list(records, workload):
    return sorted({r["n"] for r in _recs(records, workload)})


def _n(n: int) -> str:
    e = len(str(n)) - 1
    return f"1e{e}" if n == 10**e else f"{n:,}"


def _fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    if x >= 100:
        s = f"{x:,.0f}"
    elif x >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}"
    return s + unit


def _x(r: float | None) -> str:
    return "–" if r is None else (f"{r:.0f}×" if r >= 100 else f"{r:.1f}×")


def _n_section(title: str, ns: list, rows: list[list[str]]) -> list[str]:
    """A titled table with one column per pending count N."""
    return [f"## {title}", "", _table(["implementation"] + [f"N={_n(n)}" for n in ns], rows), ""]


def _table(head: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------
# targets


def targets(records: list[dict], cfg) -> list[dict]:
    out = []

    def add(target, measured, ok):
        out.append({"target": target, "measured": measured, "ok": ok})

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    def every_n(label, per_n, ok, missing=None):
        """A row judging a ratio at every N: met if all measured ones are ok."""
        vals = [r for _, r in per_n if r is not None]
        add(
            label,
            ", ".join(f"{_n(n)}: {missing if r is None and missing else _x(r)}" for n, r in per_n),
            None if not vals else all(ok(r) for r in vals),
        )

    ns = _ns_list(records, "schedule")
    if ns:
        lo, hi = ns[0], ns[-1]
        every_n(
            "call_later ≤ 6× the floor at every N",
            [
                (n, ratio(_get(records, "schedule", PW, n), _get(records, "schedule", FLOOR_C, n)))
                for n in ns
            ],
            lambda r: r <= 6,
        )
        big = 10**6
        r = ratio(_get(records, "schedule", PW, big), _get(records, "schedule", FLOOR_C, big))
        add(
            f"Wheel.call_later ≤ 4× the C call floor at N={_n(big)}",
            _x(r) if r is not None else "not measured",
            None if r is None else r <= 4,
        )
        for n, want in ((10**3, 10), (10**6, 15)):
            if n not in ns:
                add(f"call_later ≥ {want}× faster than asyncio at N={_n(n)}", "not measured", None)
                continue
            r = ratio(_get(records, "schedule", "asyncio", n), _get(records, "schedule", PW, n))
            rs = ratio(_get(records, "setup", "asyncio", n), _get(records, "setup", PW, n))
            add(
                f"call_later ≥ {want}× faster than asyncio at N={_n(n)}",
                f"{_x(r)} (steady state)"
                + (f"; {_x(rs)} over the whole fill 0→N incl. GC" if n != big else ""),
                None if r is None else r >= want,
            )
        rs = ratio(_get(records, "setup", "asyncio", big), _get(records, "setup", PW, big))
        add(
            f"whole fill 0→{_n(big)} ≥ 15× faster than asyncio",
            f"{_x(rs)} (fill incl. GC and page faults, ns per timer: pywheel "
            f"{_fmt(_get(records, 'setup', PW, big), ' ns')}, asyncio "
            f"{_fmt(_get(records, 'setup', 'asyncio', big), ' ns')})"
            if rs is not None
            else "not measured",
            None if rs is None else rs >= 15,
        )
        if 10**3 in ns:
            for peer, want in (("asyncio", 8), ("uvloop", 3)):
                r = ratio(_get(records, "pair", peer, 10**3), _get(records, "pair", PW, 10**3))
                add(
                    f"call_later+cancel ≥ {want}× faster than {peer} at N=1e3",
                    _x(r) if r else f"{peer} not measured",
                    None if r is None else r >= want,
                )
        c_pw, c_as = _get(records, "cancel", PW, hi), _get(records, "cancel", "asyncio", hi)
        add(
            "cancel at the largest N ≤ asyncio's cancel at that N",
            f"N={_n(hi)}: {_fmt(c_pw, ' ns')} vs asyncio's {_fmt(c_as, ' ns')}",
            None if c_pw is None or c_as is None else c_pw <= c_as,
        )
        c_lo = _get(records, "cancel", PW, 10**3)
        r = ratio(c_pw, c_lo) if hi > 10**3 else None
        add(
            "cancel at the largest N ≤ 1.5× pywheel's cancel at N=1e3",
            f"N={_n(hi)}: {_x(r)} ({_fmt(c_pw, ' ns')} vs {_fmt(c_lo, ' ns')})"
            if r is not None
            else "not measured (needs N=1e3 and a larger N)",
            None if r is None else r <= 1.5,
        )
        if hi > lo:
            for wl in ("schedule", "pair", "cancel"):
                r = ratio(_get(records, wl, PW, hi), _get(records, wl, PW, lo))
                add(
                    f"flat cost: {wl} at N={_n(hi)} ≤ 1.3× N={_n(lo)}",
                    _x(r),
                    None if r is None else r <= 1.3,
                )
    for shape, label in GC_SHAPES.items():
        a = next((r for r in _recs(records, "gc", PW) if r.get("callback") == shape), None)
        b = next((r for r in _recs(records, "gc", "asyncio") if r.get("callback") == shape), None)
        if a is None or b is None:
            continue
        r = a["added_ms"] / b["added_ms"] if b["added_ms"] > 0 else None
        add(
            f"gc: time a full collection gains from {_n(a['n'])} pending ≤ 5 % of what "
            f"asyncio's pending handles add ({label})",
            f"{'–' if r is None else f'{r:.1%}'} (pywheel {a['added_ms']:+.1f} ms, asyncio "
            f"{b['added_ms']:+.1f} ms over {a['baseline_ms']:.1f} / {b['baseline_ms']:.1f} ms "
            "with nothing pending)",
            None if r is None else r <= 0.05,
        )
    g_pw = [r for r in _recs(records, "gc", PW) if r.get("callback") == "shared"]
    g_as = [r for r in _recs(records, "gc", "asyncio") if r.get("callback") == "shared"]
    if g_pw:
        a = g_pw[0]
        add(
            f"gen-2 collections while scheduling {_n(a['n'])} timers: a handful (≤ 5)",
            f"{a['fill_gen2']} (asyncio: {g_as[0]['fill_gen2'] if g_as else '–'})",
            a["fill_gen2"] <= 5,
        )
    fire = [(r["n"], r["rate"]) for r in _recs(records, "fire_all", PW) if r.get("rate")]
    if fire:
        big = [x for x in fire if x[0] >= 10**5] or fire
        best = max(big, key=lambda x: x[1])
        add(
            "firing ≥ 10 M callbacks/s in large batches",
            ", ".join(f"{_n(n)}: {rate / 1e6:.2f} M/s" for n, rate in fire),
            best[1] >= 10e6,
        )
    fa = [r for r in _recs(records, "fire_all", PW) if r.get("first_late_ms") is not None]
    if fa:
        r = max(fa, key=lambda r: r["n"])
        a = next(iter(_recs(records, "fire_all", "asyncio", r["n"])), None)
        add(
            "first callback of a mass expiry of the largest fire N ≤ 5 ms late, idle main thread",
            f"N={_n(r['n'])}: {r['first_late_ms']:.2f} ms"
            + (f" (asyncio: {a['first_late_ms']:.2f} ms)" if a and "first_late_ms" in a else ""),
            r["first_late_ms"] <= 5,
        )
    m = _recs(records, "memory", PW)
    if m and "traced_bytes" in m[0]:
        a = _recs(records, "memory", "asyncio")
        add(
            "memory ≤ 112 B per pending timer incl. its handle",
            f"{m[0]['traced_bytes']:.0f} B traced, {m[0]['rss_bytes']:.0f} B RSS "
            f"(asyncio: {a[0].get('traced_bytes', 0):.0f} B traced)"
            if a
            else f"{m[0]['traced_bytes']:.0f} B traced, {m[0]['rss_bytes']:.0f} B RSS",
            m[0]["traced_bytes"] <= 112,
        )
    wk = _recs(records, "wakeups", PW)
    if wk:
        add(
            "wakeups: zero wake-ups/s with nothing pending or only far-future timers",
            "; ".join(
                f"{r['case']}: {r['wakeups_per_s']:.2f} wake-ups/s, "
                f"{r['ctx_per_s']:.2f} ctx switches/s"
                for r in wk
            ),
            all(r["wakeups_per_s"] == 0 for r in wk),
        )
    ns = _ns_list(records, "idle")
    if ns:
        resched = {n: _get(records, "idle", IDLE_RESCHEDULE, n) for n in ns}
        every_n(
            "idle: reschedule ≤ 3× the floor at every N",
            [(n, ratio(resched[n], _get(records, "idle", FLOOR_C, n))) for n in ns],
            lambda r: r <= 3,
        )
        every_n(
            "idle: reschedule ≥ 20× faster than asyncio's best way at every N",
            [(n, ratio(_idle_best_asyncio(records, n), resched[n])) for n in ns],
            lambda r: r >= 20,
            missing="not measured",
        )
    li = _recs(records, "late_idle", PW)
    if li:
        r = li[0]
        limit = r["tick_us"] + 200
        add(
            "lateness, idle main thread: p99 < 1 tick + 200 µs",
            f"p99 {r['p99_us']:.0f} µs (wheel's own histogram: {r['wheel_p99_us']:.0f} µs), "
            f"limit {limit:.0f} µs",
            r["p99_us"] < limit,
        )
    lb = _recs(records, "late_busy", PW)
    if lb:
        r = lb[0]
        add(
            "lateness, CPU-bound main thread: bounded by the 5 ms switch interval (report)",
            f"p50 {r['p50_us']:.0f} µs, p99 {r['p99_us']:.0f} µs, max {r['max_us']:.0f} µs",
            None,
        )
    st = _recs(records, "stress", PW)
    if st:
        r = st[0]
        # A run that skipped no repeating run delivered everything offered:
        # it measured the producers (jobs / interval), not the scheduler's
        # capacity, which only a saturated run (the full mode's) shows.
        offered = r["jobs"] / STRESS_INTERVAL
        bound = r.get("skipped_runs", 1) == 0 and r["second_half"] < 4e6
        add(
            "stress: ≥ 4 M repeating-job invocations/s sustained",
            f"{r['second_half'] / 1e6:.2f} M/s over the second half "
            f"({r['invocations_per_s'] / 1e6:.2f} M/s over the whole run)"
            + (
                f"; demand-bound: no run skipped, {offered / 1e6:.2f} M/s offered at the end "
                "(capacity shows only in a saturated run: the full mode)"
                if bound
                else ""
            ),
            None if bound else r["second_half"] >= 4e6,
        )
        add(
            "stress: bytes per invocation ≈ 0, gen-2 collections ≈ 0",
            f"{r['net_bytes_per_invocation']:.2f} B/invocation held, gen2 = {r['gen2']}",
            r["net_bytes_per_invocation"] < 1 and r["gen2"] <= 1,
        )
    for row in loops.targets(records):
        add(*row)
    for row in programs.targets(records):
        add(*row)
    return out


# ---------------------------------------------------------------------------
# markdown


def markdown(doc: dict) -> str:
    rec = doc["results"]
    m = doc["machine"]
    parts = [
        f"# pywheel benchmarks ({doc['mode']} mode)",
        "",
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['implementation']} "
        f"{m['python']}; {m['platform']}; pywheel {m['commit']}; {m['date']}; load average "
        f"{m['loadavg_start'][0]:.2f} at start, {m.get('loadavg_end', [0])[0]:.2f} at end; "
        f"the run took {m.get('elapsed_s', 0):.0f} s.",
        "",
    ]
    t = doc.get("targets") or []
    if t:
        parts += [
            "## Targets",
            "",
            _table(
                ["target", "measured", "result"],
                [
                    [
                        x["target"],
                        x["measured"],
                        {True: "met", False: "**missed**"}.get(
                            x["ok"],
                            "not measured"
                            if str(x["measured"]).startswith("not measured")
                            else "reported",
                        ),
                    ]
                    for x in t
                ],
            ),
            "",
        ]

    titles = {
        "schedule": "call_later with N pending (ns per call)",
        "pair": "call_later + cancel pairs with N pending (ns per pair)",
        "cancel": "cancel with N pending (ns per cancel)",
    }
    for wl, title in titles.items():
        ns = _ns_list(rec, wl)
        if not ns:
            continue
        rows = []
        for impl in _impls(rec, wl):
            row = [impl]
            for n in ns:
                v = _get(rec, wl, impl, n)
                f, p = _get(rec, wl, FLOOR_C, n), _get(rec, wl, PW, n)
                if v is None:
                    row.append("–")
                elif impl.startswith("floor"):
                    row.append(_fmt(v, " ns"))
                elif impl == PW:
                    row.append(f"{_fmt(v, ' ns')} · {_x(v / f) if f else '–'} F")
                else:
                    row.append(
                        f"{_fmt(v, ' ns')} · {_x(v / f) if f else '–'} F · "
                        f"**{_x(v / p) if p else '–'}** pw"
                    )
            rows.append(row)
        parts += _n_section(title, ns, rows)
    parts += [
        "F = multiple of the pre-bound no-op C call (the floor) in the same loop; "
        "**pw** = how many times pywheel's cost (higher: pywheel faster). "
        "Median of the rounds; GC on.",
        "",
    ]

    ns = _ns_list(rec, "setup")
    if ns:
        rows = []
        for impl in _impls(rec, "setup"):
            row = [impl]
            for n in ns:
                r = next(iter(_recs(rec, "setup", impl, n)), None)
                if r is None:
                    row.append("–")
                    continue
                td = _get(rec, "teardown", impl, n)
                row.append(
                    f"{_fmt(r['ns'], ' ns')} ({r['faults_per_op'] * 1000:.0f} pf/1k, "
                    f"{r['gen2']} gen2) / {_fmt(td, ' ns')}"
                )
            rows.append(row)
        parts += [
            "## Setup and teardown: filling 0 → N, then closing (ns per timer)",
            "",
            _table(["implementation"] + [f"N={_n(n)}" for n in ns], rows),
            "",
            "Fill cost includes GC and first-touch page faults (pf/1k = minor faults "
            "per 1000 timers, gen2 = full collections during the fill); after the "
            "slash: teardown per pending timer.",
            "",
        ]

    for wl, title in (
        ("fire_all", "Firing: N timers due at once (callbacks per second)"),
        ("fire_spread", "Firing: N timers spread over one second"),
    ):
        ns = _ns_list(rec, wl)
        if not ns:
            continue
        rows = []
        for impl in _impls(rec, wl):
            row = [impl]
            for n in ns:
                r = next(iter(_recs(rec, wl, impl, n)), None)
                if r is None:
                    row.append("–")
                elif wl == "fire_all":
                    p = _get(rec, wl, PW, n, "rate")
                    cell = f"{r['rate'] / 1e6:.2f} M/s"
                    if r.get("rate_e2e"):
                        cell += f" ({r['rate_e2e'] / 1e6:.2f})"
                    if r.get("first_late_ms") is not None:
                        cell += f" · 1st {_fmt(r['first_late_ms'], ' ms')}"
                    if p and impl not in (PW,) and not impl.startswith("floor"):
                        cell += f" · **{_x(p / r['rate'])}** pw"
                    row.append(cell)
                else:
                    row.append(
                        f"{_fmt(r['end_late_ms'], ' ms')} late · {_fmt(r['cpu_ns'], ' ns')} CPU"
                    )
            rows.append(row)
        parts += _n_section(title, ns, rows)
        if wl == "fire_all":
            parts += [
                "Rate from the first callback to the last (no-op Python callbacks); in "
                "parentheses, from the moment all were due to the last callback (this "
                "includes gathering the batch). 1st = from that moment to the first "
                "callback. **pw** = pywheel's rate over the peer's (first to last). The "
                "floors are calls in a tight loop.",
                "",
            ]
        else:
            parts += [
                "How late the last callback ran after the second ended, and process "
                "CPU per callback (all threads).",
                "",
            ]

    g = _recs(rec, "gc")
    if g:
        rows = []
        for shape, label in GC_SHAPES.items():
            a = next(
                (r["added_ms"] for r in _recs(rec, "gc", "asyncio") if r["callback"] == shape),
                None,
            )
            rows += [
                [
                    r["impl"],
                    label,
                    _fmt(r["baseline_ms"], " ms"),
                    _fmt(r["collect_ms"], " ms"),
                    f"{r['added_ms']:+.1f} ms",
                    f"{r['added_ms'] / a:.1%}" if a and a > 0 else "–",
                    f"{r['fill_gen0']}/{r['fill_gen1']}/{r['fill_gen2']}",
                    _fmt(r["fill_gc_ms"], " ms"),
                ]
                for r in g
                if r["callback"] == shape
            ]
        parts += [
            f"## Garbage collector with N={_n(g[0]['n'])} pending",
            "",
            _table(
                [
                    "implementation",
                    "callbacks",
                    "gc.collect(), nothing pending",
                    "N pending",
                    "added",
                    "vs asyncio's added",
                    "collections gen0/1/2 during fill",
                    "GC time during fill",
                ],
                rows,
            ),
            "",
            "Added = a full gc.collect() with N pending minus the same program with "
            "nothing pending (best of 3 each). With a bound method per timer, the N "
            "objects it is bound to exist in both; each pending timer holds its own "
            "bound method, as `call_later(30, conn.on_timeout)` makes one per call.",
            "",
        ]

    mem = _recs(rec, "memory")
    if mem:
        p = _get(rec, "memory", PW, key="traced_bytes")
        rows = []
        for r in mem:
            if "error" in r:
                rows.append([r["impl"], "error", "", "", _n(r["n"])])
                continue
            rows.append(
                [
                    r["impl"],
                    _fmt(r["traced_bytes"], " B"),
                    _fmt(r["rss_bytes"], " B"),
                    _x(r["traced_bytes"] / p) if p else "–",
                    _n(r["n"]),
                ]
            )
        parts += [
            "## Memory per pending timer",
            "",
            _table(["implementation", "tracemalloc", "RSS", "vs pywheel", "N"], rows),
            "",
            "A fresh interpreter per implementation; handles dropped by the caller "
            "(the scheduler keeps them).",
            "",
        ]

    li, lb = _recs(rec, "late_idle"), _recs(rec, "late_busy")
    if li or lb:
        rows = []
        for impl in _impls(rec, "late_idle") or _impls(rec, "late_busy"):
            cells = [impl]
            for wl in ("late_idle", "late_busy"):
                r = next(iter(_recs(rec, wl, impl)), None)
                cells.append(
                    "–"
                    if r is None
                    else f"{_fmt(r['p50_us'])} / {_fmt(r['p99_us'])} / {_fmt(r['max_us'])}"
                    + (f" (min {_fmt(r['min_us'])})" if r and r["min_us"] < 0 else "")
                )
            note = next((x.get("note", "") for x in (li + lb) if x["impl"] == impl), "")
            cells.append(note)
            rows.append(cells)
        n = (li or lb)[0]["n"]
        parts += [
            f"## Lateness (µs, p50 / p99 / max, {n} timers)",
            "",
            _table(["implementation", "idle main thread", "CPU-busy main thread", ""], rows),
            "",
            "Lateness = when the callback started minus its deadline, on the monotonic "
            "clock. A negative min means it ran early.",
            "",
        ]

    ns = _ns_list(rec, "idle")
    if ns:
        rows, setup_rows = [], []
        for impl in _impls(rec, "idle", IDLE_ORDER):
            row, srow = [impl], [impl]
            for n in ns:
                r = next(iter(_recs(rec, "idle", impl, n)), None)
                if r is None:
                    row.append("–")
                    srow.append("–")
                    continue
                v, f, a = r["ns"], _get(rec, "idle", FLOOR_C, n), _idle_best_asyncio(rec, n)
                if impl.startswith("floor"):
                    row.append(_fmt(v, " ns"))
                else:
                    row.append(
                        f"{_fmt(v, ' ns')} · {_x(v / f) if f else '–'} F · "
                        f"**{_x(a / v) if a else '–'}**"
                    )
                    srow.append(f"{_fmt(r['setup_ns'], ' ns')} / {_fmt(r['teardown_ns'], ' ns')}")
            rows.append(row)
            if not impl.startswith("floor"):
                setup_rows.append(srow)
        parts += _n_section(
            "Idle timeouts: a read pushes one of N 30 s timeouts back (ns per read)", ns, rows
        )
        parts += [
            "Each of N connections has a timeout 30 s away; each read moves one random "
            "connection's timeout to 30 s from now, so nothing fires. F = multiple of the "
            "floor (a pre-bound C method with the same arguments in the same loop); **bold** "
            "= asyncio's best way (the cheaper of its cancel+new and Timeout.reschedule at "
            "that N) over this row's cost (higher: faster). Median of the rounds; GC on; "
            "asyncio's purge of cancelled handles runs between chunks of reads, untimed.",
            "",
        ]
        parts += _n_section("Idle timeouts: setup / teardown (ns per connection)", ns, setup_rows)

    wk = _recs(rec, "wakeups")
    if wk:
        rows = [
            [
                r["impl"],
                r["case"],
                _fmt(r.get("wakeups_per_s")) if "wakeups_per_s" in r else "–",
                _fmt(r.get("ctx_per_s")) if "ctx_per_s" in r else r.get("note", "–"),
            ]
            for r in wk
        ]
        parts += [
            "## Wake-ups per second with nothing due",
            "",
            _table(
                ["implementation", "pending", "wheel wake-ups/s", "thread context switches/s"], rows
            ),
            "",
        ]

    st = _recs(rec, "stress")
    if st:
        rows = [
            [
                r["impl"],
                f"{r['jobs']:,}",
                _fmt(r["schedules_per_s"]),
                f"{r['invocations_per_s'] / 1e6:.2f} M",
                f"{r['second_half'] / 1e6:.2f} M",
                f"{r['gen0']}/{r['gen1']}/{r['gen2']}",
                _fmt(r["bytes_per_job"], " B"),
                _fmt(r["net_bytes_per_invocation"], " B"),
            ]
            for r in st
        ]
        cfg = doc["config"]
        parts += [
            "## Scheduler stress (Akka.NET SchedulerThroughputStressTest)",
            "",
            _table(
                [
                    "implementation",
                    "jobs scheduled",
                    "schedules/s",
                    "invocations/s",
                    "invocations/s, 2nd half",
                    "GC gen0/1/2",
                    "bytes held per job",
                    "bytes held per invocation",
                ],
                rows,
            ),
            "",
            f"{cfg['stress_producers']} producers each schedule {cfg['stress_batch']} "
            f"repeating jobs (every 20 ms, a no-op) then pause 40 ms, for "
            f"{cfg['stress_s']} s. Bytes from a second, shorter run under tracemalloc "
            "(live memory; what is allocated and freed within an invocation is not "
            "seen).",
            "",
        ]

    parts += loops.markdown(rec, _fmt)
    from .http_loops import markdown as http_markdown

    http = {r["impl"]: r for r in rec if r.get("workload") == "http"}
    if http:  # benchmarks/http_loops.py
        parts += ["## HTTP server (aiohttp on loopback)", "", http_markdown(http, []), ""]
    http = {r["impl"]: r for r in rec if r.get("workload") == "http_timeouts"}
    if http:  # the same server, every request under asyncio.timeout(30)
        parts += [
            "## HTTP server, per-request timeouts (aiohttp on loopback)",
            "",
            http_markdown(http, []),
            "Every request handled under `asyncio.timeout(30)` (never firing), no idle "
            "connection; ratios to uvloop.",
            "",
        ]
    parts += programs.markdown(rec)

    if doc.get("notes"):
        parts += ["## Notes", ""] + [f"- {x}" for x in doc["notes"]] + [""]
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# plot


def plot(doc: dict, path: Path) -> str:
    try:
        import matplotlib
    except ImportError:
        return "matplotlib not installed: no plot (pip install matplotlib)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = doc["results"]
    spread = doc["config"].get("spread_s", 1.0)
    panels = [
        ("schedule", "call_later (ns/op)"),
        ("pair", "call_later+cancel (ns/pair)"),
        ("cancel", "cancel (ns/op)"),
        ("setup", "fill 0→N incl. GC (ns/timer)"),
        ("fire_all", "fire, all due at once (ns/callback)"),
        ("fire_spread", f"fire, spread over {spread:g} s (CPU ns/callback)"),
    ]
    panels = [p for p in panels if _recs(rec, p[0])]
    if not panels:
        return "nothing to plot"
    cols = 3 if len(panels) > 2 else len(panels)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    colors = {
        FLOOR_C: "0.45",
        FLOOR_PY: "0.7",
        PW: "C3",
        "asyncio": "C0",
        "uvloop": "C4",
        "sched": "C5",
        "heapq tuples": "C6",
        "threading.Timer": "C8",
    }
    for ax, (wl, title) in zip(axes.flat, panels, strict=False):
        key = "cpu_ns" if wl == "fire_spread" else "ns"
        for i, impl in enumerate(_impls(rec, wl)):
            pts = sorted(
                (r["n"], r[key]) for r in _recs(rec, wl, impl) if r.get(key) and r.get(key) > 0
            )
            if not pts:
                continue
            st = dict(
                marker=".",
                ls="--" if impl.startswith("floor") else "-",
                color=colors.get(impl, f"C{i % 10}"),
            )
            if impl == PW:
                st.update(lw=2.5, marker="o")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=impl, **st)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("N pending")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, labels = {}, {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
            labels[lab] = lab
    fig.legend(
        list(handles.values()),
        list(labels),
        loc="lower center",
        ncol=min(8, len(labels)),
        fontsize=9,
    )
    m = doc["machine"]
    fig.suptitle(
        f"pywheel vs peers, cost per operation vs pending count ({doc['mode']}; "
        f"{m['cpu']}, {m['cores']} cores, Python {m['python']})",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return f"plot written to {path}"
