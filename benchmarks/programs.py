"""The `programs` workload: whole programs, timeout-heavy the way services are.

Each program runs on every loop that imports: stock asyncio, uvloop, rloop,
``WheelEventLoop``, ``pywheel.uvloop``, ``pywheel.rloop`` (benchmarks/loops.py's
list; an optional one missing is skipped with a note).  The programs:

  storm      T tasks x S awaits of ``asyncio.sleep(d)``, d random in 0-6 ms
             (the same seeded delays on every loop); sleeps/s.
  timeout    N gathered tasks, each ``async with asyncio.timeout(30): await
             asyncio.sleep(0)`` (a request under a deadline that never
             fires); gathers of N repeated until at least `min_requests`
             requests; requests/s.
  wait_for   the same with ``await asyncio.wait_for(fut, 30)`` on a future a
             ``loop.call_soon`` sets; requests/s.
  keepalive  C idle keep-alive connections (socketpairs, asyncio streams on
             both ends); each server end reads under one ``asyncio.timeout``
             (30 s, never firing) that it moves to 30 s from now after every
             read (``Timeout.reschedule``, which cancels the loop timer and
             arms a new one); a driver writes a 16-byte message to every
             connection in turn, then waits until all were read, R times;
             messages/s.
  heartbeat  C connections (socketpairs, streams), each server end with a
             heartbeat: a ``call_at`` timer every 10-50 ms (per connection),
             re-armed from its own callback, writing one byte; plus the
             keepalive driver's request stream (no read timeout);
             requests/s, and heartbeat lateness: ``loop.time()`` in the
             callback minus the deadline it was armed for (what the program
             sees; whole milliseconds on the uvloop loops), p50 / p99.

The protocol: in every round each loop runs each program once, the loops'
order rotated from round to round; each run in a fresh interpreter (a child
process: rloop 0.5 leaks every cancelled timer's callback, which made every
later run in a shared process pay for collecting them; see run_child), on a
fresh loop (``asyncio.Runner``), after ``gc.collect()``, the collector on;
the rounds' runs are driven from one process.
Reported: the median over the rounds; ratios to stock asyncio, and
pywheel.uvloop / uvloop, pywheel.uvloop / rloop, pywheel.rloop / rloop,
WheelEventLoop / asyncio as the median of the per-round throughput ratios.

    python -m benchmarks --only programs [--quick]
    python -m benchmarks.programs PROGRAM LOOP [--quick] [--repeat K]   # one loop (profiling)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import socket
import statistics
import sys
import time

from . import loops as L
from .util import json_child

MSG = b"m" * 16
IDLE = 30.0  # keepalive's idle timeout: never fires here

#: per mode: rounds, storm (T, S), request Ns, min requests per run,
#: keepalive (C, R), heartbeat (C, R)
SIZES = {
    "full": dict(
        rounds=5,
        storm=(5000, 20),
        ns=[10**3, 10**4, 10**5],
        min_requests=10_000,
        keepalive=(1000, 30),
        heartbeat=(1000, 30),
    ),
    "quick": dict(
        rounds=5,
        storm=(1000, 10),
        ns=[10**3, 10**4],
        min_requests=10_000,
        keepalive=(200, 20),
        heartbeat=(200, 20),
    ),
    "smoke": dict(
        rounds=1,
        storm=(50, 3),
        ns=[100],
        min_requests=100,
        keepalive=(10, 3),
        heartbeat=(10, 3),
    ),
}

#: loop name -> factory, in table order (the loops workload's, without the
#: wheel called directly, which is no loop)
FACTORIES = {cls.name: f for cls, f in L.LOOPS if f is not None}
CLASSES = {cls.name: cls for cls, f in L.LOOPS if f is not None}
STOCK, UV, RL, WL, PWU, PWR = (
    "asyncio",
    "uvloop",
    "rloop",
    "WheelEventLoop",
    "pywheel.uvloop",
    "pywheel.rloop",
)
#: (numerator, denominator) of the speed-ups reported beside the table
PAIRS = [(PWU, UV), (PWU, RL), (PWR, RL), (WL, STOCK)]
#: the timeout-heavy programs (the targets' "every timeout-heavy program")
TIMEOUT_HEAVY = ("storm", "timeout", "wait_for", "keepalive", "heartbeat")


def available() -> tuple[list[str], list[str]]:
    """(loop names that import, notes for the ones that do not)."""
    names, notes = [], []
    for name, cls in CLASSES.items():
        why = cls().unavailable()
        if why:
            notes.append(f"programs: {name} skipped: {why}.")
        else:
            names.append(name)
    return names, notes


# ---------------------------------------------------------------------------
# the programs: each a coroutine returning (seconds, operations, extra dict)


async def storm(tasks: int, sleeps: int, seed: int = 31):
    rng = random.Random(seed)
    delays = [rng.uniform(0, 0.006) for _ in range(tasks * sleeps)]
    start = asyncio.Event()

    async def task(i):
        await start.wait()
        for d in delays[i * sleeps : (i + 1) * sleeps]:
            await asyncio.sleep(d)

    ts = [asyncio.ensure_future(task(i)) for i in range(tasks)]
    await asyncio.sleep(0)  # every task waits on `start`
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*ts)
    return time.perf_counter() - t0, tasks * sleeps, {}


async def timeout_requests(n: int, min_requests: int):
    async def request():
        async with asyncio.timeout(30):
            await asyncio.sleep(0)

    reps = -(-min_requests // n)
    t0 = time.perf_counter()
    for _ in range(reps):
        await asyncio.gather(*[request() for _ in range(n)])
    return time.perf_counter() - t0, n * reps, {"reps": reps}


async def wait_for_requests(n: int, min_requests: int):
    loop = asyncio.get_running_loop()

    async def request():
        fut = loop.create_future()
        loop.call_soon(fut.set_result, None)
        await asyncio.wait_for(fut, 30)

    reps = -(-min_requests // n)
    t0 = time.perf_counter()
    for _ in range(reps):
        await asyncio.gather(*[request() for _ in range(n)])
    return time.perf_counter() - t0, n * reps, {"reps": reps}


async def _pairs(conns: int):
    """conns socketpairs, each end wrapped in asyncio streams:
    [(server reader, server writer, client writer)]."""
    out = []
    for _ in range(conns):
        a, b = socket.socketpair()
        sr, sw = await asyncio.open_connection(sock=a)
        _, cw = await asyncio.open_connection(sock=b)
        out.append((sr, sw, cw))
    return out


async def _drive(pairs, rounds: int, state: dict) -> float:
    """The request stream: one MSG to every connection in turn, then wait
    until the server ends have read them all; `rounds` times.  Seconds."""
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    for r in range(rounds):
        state["want"] = (r + 1) * len(pairs) * len(MSG)
        state["done"] = loop.create_future()
        for _, _, cw in pairs:
            cw.write(MSG)
        if state["got"] < state["want"]:
            await state["done"]
    return time.perf_counter() - t0


def _got(state: dict, n: int) -> None:
    state["got"] += n
    if state["got"] >= state["want"] and not state["done"].done():
        state["done"].set_result(None)


async def _close(pairs, servers) -> None:
    # The server tasks are cancelled rather than ended by an EOF: on rloop
    # 0.5, closing a client writer made with open_connection(sock=...) did
    # not reach the server end (its read waited until the 30 s timeout).
    for t in servers:
        t.cancel()
    await asyncio.gather(*servers, return_exceptions=True)
    for _, sw, cw in pairs:
        cw.close()
        sw.close()
    await asyncio.sleep(0)


async def keepalive(conns: int, rounds: int):
    loop = asyncio.get_running_loop()
    pairs = await _pairs(conns)
    state = {"got": 0, "want": 1 << 62, "done": loop.create_future()}
    moves = [0]

    async def serve(reader):
        async with asyncio.timeout(IDLE) as cm:
            while data := await reader.read(4096):
                cm.reschedule(loop.time() + IDLE)  # the idle timeout moves on every read
                moves[0] += 1
                _got(state, len(data))

    servers = [asyncio.ensure_future(serve(sr)) for sr, _, _ in pairs]
    await asyncio.sleep(0)
    secs = await _drive(pairs, rounds, state)
    await _close(pairs, servers)
    return secs, conns * rounds, {"reads": moves[0]}


async def heartbeat(conns: int, rounds: int):
    loop = asyncio.get_running_loop()
    pairs = await _pairs(conns)
    state = {"got": 0, "want": 1 << 62, "done": loop.create_future()}
    late: list[float] = []
    measuring = [False]
    handles: list = [None] * conns

    def beat(i, interval, due):
        now = loop.time()
        if measuring[0]:
            late.append(now - due)
        pairs[i][1].write(b"h")
        due += interval
        while due <= now:  # skip missed beats, as a heartbeat does
            due += interval
        handles[i] = loop.call_at(due, beat, i, interval, due)

    for i in range(conns):
        interval = (10 + (i * 7) % 41) / 1000  # 10-50 ms
        due = loop.time() + interval
        handles[i] = loop.call_at(due, beat, i, interval, due)

    async def serve(reader):
        while data := await reader.read(4096):
            _got(state, len(data))

    servers = [asyncio.ensure_future(serve(sr)) for sr, _, _ in pairs]
    await asyncio.sleep(0)
    measuring[0] = True
    secs = await _drive(pairs, rounds, state)
    measuring[0] = False
    for h in handles:
        h.cancel()
    await _close(pairs, servers)
    late.sort()
    pct = (lambda q: late[min(len(late) - 1, int(q * len(late)))] * 1e3) if late else None
    return (
        secs,
        conns * rounds,
        {
            "beats": len(late),
            "late_p50_ms": pct and pct(0.5),
            "late_p99_ms": pct and pct(0.99),
        },
    )


def cases(mode: str) -> list[tuple[str, str, object]]:
    """[(program, size label, coroutine function of no argument)]."""
    z = SIZES[mode]
    t, s = z["storm"]
    out = [("storm", f"{t:,} tasks × {s} sleeps", lambda: storm(t, s))]
    for prog, fn in (("timeout", timeout_requests), ("wait_for", wait_for_requests)):
        for n in z["ns"]:
            mr = z["min_requests"]
            out.append((prog, f"N={L._n(n)}", lambda fn=fn, n=n, mr=mr: fn(n, mr)))
    for prog, fn in (("keepalive", keepalive), ("heartbeat", heartbeat)):
        c, r = z[prog]
        out.append((prog, f"{c:,} connections × {r} rounds", lambda fn=fn, c=c, r=r: fn(c, r)))
    return out


def run_once(name: str, make) -> tuple[float, int, dict]:
    """One program on a fresh loop of `name`, after a full collection."""
    gc.collect()
    with asyncio.Runner(loop_factory=FACTORIES[name]) as runner:
        return runner.run(make())


def run_child(prog: str, size: str, name: str, mode: str) -> tuple[float, int, dict]:
    """run_once in a fresh interpreter (`python -m benchmarks.programs ...
    --json`).  Why not in this process: rloop 0.5 keeps every cancelled
    timer's callback, arguments and context alive after its loop is closed
    (30,000 objects after one wait_for run of 10,000 requests, 70,000 after
    a timeout run, counted with gc.get_objects() after gc.collect()), so in
    one process every later run, on every loop, paid for collections over
    rloop's leftovers: in a --quick run the untimed gc.collect()s and the
    collections inside the timed runs grew until a step took 8x its timed
    work.  A child per run charges rloop's leftovers to rloop's run alone."""
    args = ["-m", "benchmarks.programs", prog, name, "--mode", mode, "--size", size]
    s, ops, extra = json_child(
        [*args, "--repeat", "1", "--json"], f"{prog} {size} on {name}", timeout=900
    )
    return s, ops, extra


def _conns_needed(mode: str) -> int:
    z = SIZES[mode]
    return 4 * max(z["keepalive"][0], z["heartbeat"][0]) + 200


def _raise_nofile(mode: str, notes: list[str]) -> None:
    """Each connection is a socketpair (two descriptors), and the runner
    may keep a loop's self-pipe and the previous loop's ends a while."""
    from .http_loops import raise_nofile

    soft, _ = raise_nofile()
    if soft < _conns_needed(mode):
        for k in ("keepalive", "heartbeat"):
            c, r = SIZES[mode][k]
            SIZES[mode][k] = (max(1, (soft - 200) // 4), r)
        notes.append(f"programs: connections capped by RLIMIT_NOFILE ({soft:,} descriptors).")


def program_unit(prog: str, size: str, mode: str, names: list[str], rounds: int) -> list[dict]:
    """Every loop once a round, order rotated; records per loop (median
    over rounds) and the PAIRS' speed-ups (median of per-round ratios)."""
    per: dict[str, list[tuple[float, int, dict]]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            per[name].append(run_child(prog, size, name, mode))
    out = []
    for name, runs in per.items():
        rates = [ops / s for s, ops, _ in runs]
        rec = {
            "workload": "program",
            "program": prog,
            "size": size,
            "impl": name,
            "s": statistics.median(s for s, _, _ in runs),
            "rate": statistics.median(rates),
            "rates": [round(x, 1) for x in rates],
            "ops": runs[0][1],
        }
        if prog == "heartbeat":
            for key in ("late_p50_ms", "late_p99_ms"):
                xs = [x[key] for _, _, x in runs if x.get(key) is not None]
                rec[key] = statistics.median(xs) if xs else None
            rec["beats"] = sum(x["beats"] for _, _, x in runs)
        out.append(rec)
    for a, b in PAIRS:
        if a in per and b in per:
            ratios = sorted(
                (ops_a / sa) / (ops_b / sb)
                for (sa, ops_a, _), (sb, ops_b, _) in zip(per[a], per[b], strict=True)
            )
            out.append(
                {
                    "workload": "program_ratio",
                    "program": prog,
                    "size": size,
                    "impl": f"{a} / {b}",
                    "num": a,
                    "den": b,
                    "ratio": statistics.median(ratios),
                    "ratios": [round(x, 3) for x in ratios],
                }
            )
    return out


def plan(mode: str, ok, notes: list[str]) -> list:
    """[(label, thunk)] for run.build_plan."""
    names, why = available()
    notes.extend(why)
    names = [n for n in names if ok(n)]
    if not names:
        return []
    _raise_nofile(mode, notes)
    rounds = SIZES[mode]["rounds"]
    notes.append(
        f"programs: {rounds} alternating round(s), every loop once a round in rotated order; "
        "median of the rounds; speed-ups are medians of per-round throughput ratios."
    )
    load = {"workload": "programs_load", "impl": "machine", "loops": names}

    def first():
        load["loadavg_start"] = os.getloadavg()
        return []

    def last():
        load["loadavg_end"] = os.getloadavg()
        return [load]

    return [
        ("programs: load average", first),
        *(
            (
                f"programs {prog} {size}",
                lambda p=prog, s=size: program_unit(p, s, mode, names, rounds),
            )
            for prog, size, _ in cases(mode)
        ),
        ("programs: load average", last),
    ]


# ---------------------------------------------------------------------------
# report

UNITS = {
    "storm": "sleeps/s",
    "timeout": "requests/s",
    "wait_for": "requests/s",
    "keepalive": "messages/s",
    "heartbeat": "requests/s",
}


def _rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def _ratio(records, prog, size, a, b):
    for r in records:
        if r.get("workload") == "program_ratio" and (
            r["program"],
            r["size"],
            r["num"],
            r["den"],
        ) == (prog, size, a, b):
            return r["ratio"]
    return None


def _cases(records) -> list[tuple[str, str]]:
    seen = []
    for r in records:
        if r.get("workload") == "program" and (r["program"], r["size"]) not in seen:
            seen.append((r["program"], r["size"]))
    return seen


def markdown(records) -> list[str]:
    recs = [r for r in records if r.get("workload") == "program"]
    if not recs:
        return []
    impls = [n for n in FACTORIES if any(r["impl"] == n for r in recs)]
    rows, ratio_rows, late_rows = [], [], []
    for prog, size in _cases(records):
        by = {r["impl"]: r for r in recs if (r["program"], r["size"]) == (prog, size)}
        base = by.get(STOCK)
        cells = []
        for n in impls:
            r = by.get(n)
            if r is None:
                cells.append("–")
                continue
            c = f"{_rate(r['rate'])} ({r['s']:.3f} s)"
            if base and n != STOCK:
                c += f" **{r['rate'] / base['rate']:.2f}×**"
            cells.append(c)
        rows.append([f"{prog}: {size} ({UNITS[prog]})"] + cells)
        ratio_rows.append(
            [f"{prog}: {size}"]
            + [
                "–" if (x := _ratio(records, prog, size, a, b)) is None else f"{x:.2f}×"
                for a, b in PAIRS
            ]
        )
        if prog == "heartbeat":
            late_rows.append(
                [f"{prog}: {size}"]
                + [
                    "–"
                    if (r := by.get(n)) is None or r.get("late_p50_ms") is None
                    else f"{r['late_p50_ms']:.2f} / {r['late_p99_ms']:.2f}"
                    for n in impls
                ]
            )

    def table(head, body):
        return [
            "| " + " | ".join(head) + " |",
            "|---|" + "---:|" * (len(head) - 1),
            *("| " + " | ".join(x) + " |" for x in body),
        ]

    load = next((r for r in records if r.get("workload") == "programs_load"), None)
    when = (
        f" Load average (1 min) {load['loadavg_start'][0]:.2f} when the programs started, "
        f"{load['loadavg_end'][0]:.2f} when they ended."
        if load and "loadavg_end" in load
        else ""
    )
    return [
        "## Programs: whole programs, timeout-heavy (throughput)",
        "",
        *table(["program"] + impls, rows),
        "",
        "Throughput, median of the alternating rounds (seconds of that median run in "
        "brackets); **bold**: the loop's throughput over stock asyncio's. storm: random "
        "sleeps of 0-6 ms; timeout: `async with asyncio.timeout(30): await "
        "asyncio.sleep(0)` per request, N gathered; wait_for: `wait_for(fut, 30)` on a "
        "future set by `call_soon`; keepalive: an `asyncio.timeout` per connection moved "
        "by `Timeout.reschedule` on every read; heartbeat: a `call_at` timer per "
        "connection re-armed every 10-50 ms beside the request stream." + when,
        "",
        "### Programs: speed-ups (median of per-round throughput ratios)",
        "",
        *table(["program"] + [f"{a} / {b}" for a, b in PAIRS], ratio_rows),
        "",
        *(
            [
                "### Heartbeat lateness (ms, p50 / p99, median over rounds)",
                "",
                *table(["program"] + impls, late_rows),
                "",
                "`loop.time()` in the heartbeat's callback minus its deadline: whole "
                "milliseconds on the uvloop loops, whose clock is libuv's.",
                "",
            ]
            if late_rows
            else []
        ),
    ]


def targets(records) -> list[tuple[str, str, bool | None]]:
    """The issue-31 rows: judged on the per-round speed-ups, every case of
    the programs named; not measured where a loop did not run."""
    cases = _cases(records)
    if not cases:
        return []
    ran = {r["impl"] for r in records if r.get("workload") == "program"}
    heavy = [c for c in cases if c[0] in TIMEOUT_HEAVY]
    rows = []

    def row(label, a, b, ok, which, http=None):
        if not {a, b} <= ran:
            miss = ", ".join(x for x in (a, b) if x not in ran)
            rows.append((label, f"not measured ({miss} did not run)", None))
            return
        cells, oks = [], []
        for prog, size in which:
            x = _ratio(records, prog, size, a, b)
            if x is not None:
                cells.append(f"{prog} {size}: {x:.2f}×")
                oks.append(ok(x))
        if http:  # (label, ratio) from the HTTP per-request-timeouts table
            cells.append(f"{http[0]}: {http[1]:.2f}×")
            oks.append(ok(http[1]))
        rows.append((label, "; ".join(cells), all(oks) if oks else None))

    def faster(x):
        return x > 1

    label = "pywheel.uvloop ≥ 1.5× uvloop's throughput on every timeout-heavy program"
    row(label, PWU, UV, lambda x: x >= 1.5, heavy)
    row("pywheel.uvloop ahead of rloop on every timeout-heavy program", PWU, RL, faster, heavy)
    row("pywheel.rloop ahead of rloop on every timeout-heavy program", PWR, RL, faster, heavy)
    http = {r["impl"]: r["requests_s"] for r in records if r.get("workload") == "http_timeouts"}
    h = (
        ("HTTP, per-request timeouts", http["wheel"] / http["stock"])
        if {
            "wheel",
            "stock",
        }
        <= set(http)
        and http["stock"]
        else None
    )
    row("WheelEventLoop ahead of stock asyncio on every program", WL, STOCK, faster, cases, h)
    return rows


# ---------------------------------------------------------------------------
# one program on one loop, for profiling


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.programs",
        description="Runs one program on one loop (for perf); python -m benchmarks "
        "--only programs runs them all.",
    )
    ap.add_argument("program", choices=list(UNITS))
    ap.add_argument("loop", choices=list(FACTORIES))
    ap.add_argument("--mode", choices=list(SIZES), default="full")
    ap.add_argument("--size", help="a size label's start, e.g. N=1e4 (default: the first)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print [seconds, ops, extra] per run")
    args = ap.parse_args(argv)
    notes: list[str] = []
    _raise_nofile(args.mode, notes)
    picked = [
        c
        for c in cases(args.mode)
        if c[0] == args.program and (not args.size or c[1].startswith(args.size))
    ]
    if not picked:
        ap.error("no such size")
    prog, size, make = picked[0]
    for _ in range(args.repeat):
        s, ops, extra = run_once(args.loop, make)
        if args.json:
            print(json.dumps([s, ops, extra]))
            continue
        print(f"{prog} {size} on {args.loop}: {ops / s:,.0f} {UNITS[prog]} ({s:.3f} s) {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
