"""The workloads.  Each unit function returns a list of result records (dicts).

Setup, work and teardown are timed apart (libuv's million-timers benchmark):
the fill of N pending timers is the setup, the measured rounds are the work,
closing the scheduler is the teardown.  The cyclic GC stays on throughout,
as users run it; collections that happen inside a timed region are counted
and stored with the result.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from operator import attrgetter

import pywheel

from . import peers as P
from .util import (
    ROOT,
    GcCounter,
    ctx_switches,
    minflt,
    mono_ns,
    nop,
    percentile,
    perf_ns,
    rss,
    tids,
)


@dataclass
class Config:
    mode: str
    ns: list[int]
    fire_ns: list[int]
    k_min: int
    k_max: int
    rounds: int
    budget_s: float  # per (peer, N, workload): slow peers get fewer ops
    gc_n: int
    mem_n: int
    late_m: int
    late_span: float
    wakeup_s: float
    stress_s: float
    stress_producers: int
    stress_batch: int
    stress_trace_s: float
    idle_ns: list[int]
    idle_reads: int  # reads per round
    idle_budget_s: float  # per (peer, N): estimated fill + reads + teardown
    fire_budget_s: float = 600.0
    spread_s: float = 1.0  # fire_spread: deadlines spread over this many seconds
    thread_mem_n: int = 1000  # threading.Timer's N in the memory workload
    # the loops workload (benchmarks/loops.py)
    loops_ns: list[int] = field(default_factory=lambda: [10**3, 10**5, 10**6])
    loops_mem_n: int = 200_000
    storm_tasks: int = 20_000
    storm_sleeps: int = 50
    storm_runs: int = 1
    extra: dict = field(default_factory=dict)


MODES = {
    "full": Config(
        "full",
        [10**3, 10**5, 10**6, 10**7],
        [10**3, 10**5, 10**6, 10**7],
        k_min=100,
        k_max=20_000,
        rounds=5,
        budget_s=4.0,
        gc_n=10**6,
        mem_n=10**6,
        late_m=2000,
        late_span=3.0,
        wakeup_s=5.0,
        stress_s=10.0,
        stress_producers=10,
        stress_batch=200,
        stress_trace_s=3.0,
        idle_ns=[10**3, 10**4, 10**5, 10**6, 10**7],
        idle_reads=100_000,
        idle_budget_s=150.0,
    ),
    "quick": Config(
        "quick",
        [10**3, 10**4],
        [10**3, 10**4],
        k_min=100,
        k_max=2_000,
        rounds=3,
        budget_s=0.3,
        gc_n=10**5,
        mem_n=5 * 10**4,
        late_m=200,
        late_span=0.4,
        wakeup_s=0.3,
        stress_s=0.8,
        stress_producers=10,
        stress_batch=200,
        stress_trace_s=0.4,
        idle_ns=[10**3, 10**4, 10**5],
        idle_reads=20_000,
        idle_budget_s=20.0,
        spread_s=0.25,
        thread_mem_n=200,
        loops_ns=[10**3, 10**5],
        loops_mem_n=50_000,
        storm_tasks=2_000,
        storm_sleeps=10,
    ),
    "smoke": Config(
        "smoke",
        [300],
        [300],
        k_min=30,
        k_max=30,
        rounds=1,
        budget_s=0.05,
        gc_n=10**4,
        mem_n=10**4,
        late_m=20,
        late_span=0.1,
        wakeup_s=0.15,
        stress_s=0.2,
        stress_producers=2,
        stress_batch=20,
        stress_trace_s=0.1,
        idle_ns=[300],
        idle_reads=300,
        idle_budget_s=10.0,
        fire_budget_s=30.0,
        spread_s=0.1,
        thread_mem_n=50,
        loops_ns=[300],
        loops_mem_n=10**4,
        storm_tasks=100,
        storm_sleeps=3,
    ),
}


# ---------------------------------------------------------------------------
# schedule-only, schedule+cancel pairs, cancel-only at N pending


def op_unit(cls: type[P.Peer], n: int, cfg: Config) -> list[dict]:
    peer = cls()
    base = {"impl": peer.name, "n": n}
    gc.collect()
    peer.open()
    g, f0, t0 = GcCounter(), minflt(), perf_ns()
    with g:
        peer.fill(n)
    setup_ns = perf_ns() - t0
    recs = []
    if not peer.floor:
        recs.append(
            {
                **base,
                "workload": "setup",
                "ns": setup_ns / n,
                "faults_per_op": (minflt() - f0) / n,
                **g.as_dict(),
            }
        )
    k = max(cfg.k_min, min(n // 10, cfg.k_max))
    for wl in ("schedule", "pair", "cancel"):
        recs.append({**base, "workload": wl, **_rounds(peer, wl, k, cfg)})
    pending = peer.pending()
    t0 = perf_ns()
    peer.close()
    if not peer.floor:
        recs.append({**base, "workload": "teardown", "ns": (perf_ns() - t0) / max(1, pending)})
    del peer
    gc.collect()
    return recs


def _one_round(peer: P.Peer, wl: str, k: int, g: GcCounter) -> tuple[int, int]:
    """Runs one timed round of k operations; returns (elapsed ns, page faults)."""
    if wl == "schedule":
        peer.release(peer.take(k))  # k scattered free slots; pending back to N-k
        delays = P.POOL[:k]
        f0 = minflt()
        with g:
            dt = peer.schedule(delays)
        f = minflt() - f0
        peer.note_dropped(k)
        return dt, f
    if wl == "pair":
        peer.release(peer.take(k))
        delays = P.PAIR_DELAYS[:k]
        f0 = minflt()
        with g:
            dt = peer.pair(delays)
        f = minflt() - f0
        peer.after_pairs(k)
        peer.fill(k)
        return dt, f
    hs = peer.take(k)
    f0 = minflt()
    with g:
        dt = peer.cancel(hs)
    f = minflt() - f0
    peer.after_cancel(hs)
    del hs
    peer.fill(k)
    return dt, f


def _rounds(peer: P.Peer, wl: str, k: int, cfg: Config) -> dict:
    g = GcCounter()
    # a small probe estimates the cost, so that slow peers (sched's O(N)
    # cancel) get fewer operations, then one warm-up round, then the rounds
    probe = min(k, 3)
    dt, _ = _one_round(peer, wl, probe, GcCounter())
    est = dt / probe
    budget = cfg.budget_s * 1e9
    rounds = cfg.rounds
    if est * k * rounds > budget:
        k = max(2, min(k, int(budget / rounds / est)))
        rounds = max(1, min(rounds, int(budget / (est * k))))
    elif est * k * (rounds + 1) <= budget * 2:
        _one_round(peer, wl, k, GcCounter())
    samples, faults = [], 0
    for _ in range(rounds):
        dt, f = _one_round(peer, wl, k, g)
        samples.append(dt / k)
        faults += f
    s = sorted(samples)
    return {
        "ns": s[len(s) // 2],
        "ns_min": s[0],
        "k": k,
        "rounds": rounds,
        "samples": [round(x, 2) for x in samples],
        "faults_per_op": faults / (k * rounds),
        "pending_after": peer.pending(),
        **g.as_dict(),
    }


# ---------------------------------------------------------------------------
# firing


def fire_unit(name: str, n: int, spread: bool, cfg: Config, fill_ns: float | None) -> dict:
    runner, cls = P.FIRE_PEERS[name]
    wl = "fire_spread" if spread else "fire_all"
    base = {"workload": wl, "impl": name, "n": n}
    needs_margin = spread or name in P.THREADED
    est_s = (fill_ns or cls.est_fill_ns) * n / 1e9
    rng = random.Random(n)
    sp = cfg.spread_s
    offs = [rng.random() * sp for _ in range(n - 2)] if spread else [0.0] * (n - 2)
    rec: dict = {}
    for attempt in range(3):
        gc.collect()
        start = time.monotonic()
        margin = 1.5 * est_s + 0.05 * n / 1e6 + min(0.3, sp) if needs_margin else 0.0
        T = start + margin
        ds = list(map(T.__add__, offs))
        end = T + (sp if spread else 1e-6)
        g = GcCounter()
        with g:
            r = runner(T, ds, end)
        del ds
        fill_s = r["filled"] / 1e9 - start
        if needs_margin and r["filled"] > T * 1e9:
            est_s = fill_s * (1.5 + attempt)  # it overran the deadline: redo
            rec = {"overran": True}
            continue
        rec = {}
        break
    t_ns = T * 1e9
    span = (r["last"] - r["first"]) / 1e9
    # from the moment every timer was due (the deadline, or the start of a
    # loop that only runs once filled) to the last callback: includes the
    # time to collect the batch, which first-to-last leaves out
    due_ns = t_ns if needs_margin else r["filled"]
    e2e = (r["last"] - due_ns) / 1e9
    rec.update(
        {
            **base,
            "fill_s": round(fill_s, 3),
            "rate": n / span if span > 0 else float("inf"),
            "rate_e2e": n / e2e if e2e > 0 else float("inf"),
            "ns": span * 1e9 / n,  # wall ns per callback, first to last
            "cpu_ns": (r["cpu1"] - r["cpu0"]) / n,  # process CPU per callback
            "start_late_ms": (r["first"] - t_ns) / 1e6 if needs_margin else None,
            # from the same moment to the first callback: how long the
            # first of a mass expiry waits for the batch to be gathered
            "first_late_ms": (r["first"] - due_ns) / 1e6,
            "end_late_ms": (r["last"] - end * 1e9) / 1e6 if needs_margin else None,
            **{k: r[k] for k in ("batches", "max_batch") if k in r},
            **g.as_dict(),
        }
    )
    return rec


def floor_fire_unit(n: int) -> list[dict]:
    """The floors as callback rates: n calls of a no-op, C and Python."""
    out = []
    for cls in (P.FloorC, P.FloorPy):
        xs = [0.0] * n
        best = min(cls().schedule(xs) for _ in range(3))
        out.append(
            {
                "workload": "fire_all",
                "impl": cls.name,
                "n": n,
                "ns": best / n,
                "rate": n / (best / 1e9),
            }
        )
    return out


# ---------------------------------------------------------------------------
# garbage collector


GC_PEERS = [P.PyWheel, P.AsyncioLoop, P.UvLoop, P.Sched, P.HeapqTuples]
#: the timers' callbacks: one function shared by all, or a bound method of a
#: per-timer object (a connection) that exists whether or not it has a timer
GC_SHAPES = ("shared", "bound")


class Conn:
    """A user's per-connection object, alive with or without a pending timer."""

    def on_timeout(self) -> None:
        pass


def _collect_ms(times: int = 3) -> float:
    best = None
    for _ in range(times):
        t = perf_ns()
        gc.collect()
        dt = perf_ns() - t
        best = dt if best is None else min(best, dt)
    return best / 1e6


def gc_unit(cls: type[P.Peer], shape: str, cfg: Config) -> dict:
    """The time a full collection gains from N pending timers: collect()
    with them minus the same program with nothing pending (the user's own
    objects, which cost the same either way, are there both times)."""
    n = cfg.gc_n
    conns = [Conn() for _ in range(n)] if shape == "bound" else None
    gc.collect()
    baseline = _collect_ms()
    peer = cls()
    peer.open()
    # a bound method made per call, as in call_later(30, conn.on_timeout)
    cbs = map(attrgetter("on_timeout"), conns) if conns else None
    g, t0 = GcCounter(), perf_ns()
    with g:
        peer.fill(n, keep=False, callbacks=cbs)
    fill_ns = (perf_ns() - t0) / n
    full = _collect_ms()
    peer.close()
    del peer, conns
    gc.collect()
    return {
        "workload": "gc",
        "impl": cls.name,
        "n": n,
        "callback": shape,
        "collect_ms": full,
        "baseline_ms": baseline,
        "added_ms": full - baseline,
        "fill_ns": fill_ns,
        "fill_gen0": g.counts[0],
        "fill_gen1": g.counts[1],
        "fill_gen2": g.counts[2],
        "fill_gc_ms": round(sum(g.ns) / 1e6, 3),
    }


# ---------------------------------------------------------------------------
# memory per pending timer: a fresh interpreter per peer, so RSS is clean


MEM_PEERS = [P.PyWheel, P.AsyncioLoop, P.UvLoop, P.Sched, P.HeapqTuples, P.ThreadTimer]


def mem_units(classes: list[type[P.Peer]], cfg: Config) -> list[dict]:
    """Runs one child per implementation, all at once (each its own RSS)."""
    env = dict(os.environ)
    # The children import the pywheel this process imported (an installed
    # one, under the test suite), and find benchmarks/ in ROOT after it.
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(pywheel.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [pkg_parent, env.get("PYTHONPATH"), str(ROOT)])
    )
    env["PYTHONSAFEPATH"] = "1"  # nor the working folder before them
    procs = []
    for cls in classes:
        n = min(cfg.mem_n, cfg.thread_mem_n if cls is P.ThreadTimer else cfg.mem_n)
        cmd = [sys.executable, "-m", "benchmarks.memchild", cls.__name__, str(n)]
        procs.append(
            (
                cls,
                n,
                subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                    cwd=str(ROOT),
                ),
            )
        )
    out = []
    for cls, n, p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        rec = {"workload": "memory", "impl": cls.name, "n": n}
        if p.returncode:
            rec["error"] = stderr.strip()[-500:]
        else:
            rec.update(json.loads(stdout))
        out.append(rec)
    return out


def measure_memory(cls: type[P.Peer], n: int) -> dict:
    """In the child: RSS delta and traced bytes for n pending timers."""
    peer = cls()
    peer.open()
    gc.collect()
    r0 = rss()
    peer.fill(n, keep=False)
    gc.collect()
    r1 = rss()
    peer.close()
    gc.collect()
    tracemalloc.start()
    peer = cls()
    peer.open()
    gc.collect()
    m0 = tracemalloc.get_traced_memory()[0]
    peer.fill(n, keep=False)
    gc.collect()
    m1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    peer.close()
    return {"rss_bytes": (r1 - r0) / n, "traced_bytes": (m1 - m0) / n}


# ---------------------------------------------------------------------------
# lateness with an idle and with a CPU-busy main thread


def _wait(done: threading.Event, busy: bool, timeout: float) -> None:
    end = time.monotonic() + timeout
    if not busy:
        done.wait(timeout)
        return
    x = 0
    while not done.is_set() and time.monotonic() < end:
        for _ in range(2000):  # pure Python: holds the GIL between switch requests
            x += 1


def _late_targets(m: int, span: float) -> list[int]:
    rng = random.Random(m)
    t0 = mono_ns() + (200_000_000 if span >= 0.5 else 50_000_000)
    return sorted(t0 + int(rng.random() * span * 1e9) for _ in range(m))


def _late_pywheel(targets, done, lat, busy, timeout):
    import pywheel

    with pywheel.Wheel() as w:
        for t in targets:
            w.call_at(t / 1e9, _rec, t, lat, len(targets), done)
        _wait(done, busy, timeout)
        st = w.stats()
    return {
        "wheel_p50_us": st["late_p50"] * 1e6,
        "wheel_p99_us": st["late_p99"] * 1e6,
        "wheel_max_us": st["late_max"] * 1e6,
        "tick_us": st["tick"] * 1e6,
    }


def _rec(t, lat, m, done):
    lat.append(mono_ns() - t)
    if len(lat) >= m:
        done.set()


def _late_loop(new_loop):
    def run(targets, done, lat, busy, timeout):
        loop = new_loop()
        th = threading.Thread(target=loop.run_forever, daemon=True)
        th.start()

        def schedule_all():
            off = loop.time() - time.monotonic()
            for t in targets:
                loop.call_at(t / 1e9 + off, _rec, t, lat, len(targets), done)

        loop.call_soon_threadsafe(schedule_all)
        _wait(done, busy, timeout)
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        loop.close()
        return {}

    return run


def _new_uvloop():
    import uvloop

    return uvloop.new_event_loop()


def _late_threads(targets, done, lat, busy, timeout):
    now = mono_ns()
    ts = [threading.Timer((t - now) / 1e9, _rec, (t, lat, len(targets), done)) for t in targets]
    for t in ts:
        t.start()
    _wait(done, busy, timeout)
    for t in ts:
        t.cancel()
    return {}


def _late_sched(targets, done, lat, busy, timeout):
    import sched

    s = sched.scheduler(time.monotonic, time.sleep)
    for t in targets:
        s.enterabs(t / 1e9, 0, _rec, (t, lat, len(targets), done))
    th = threading.Thread(target=s.run, daemon=True)
    th.start()
    _wait(done, busy, timeout)
    th.join(5)
    return {}


LATE_PEERS = {
    "pywheel": _late_pywheel,
    "asyncio": _late_loop(asyncio.new_event_loop),
    "uvloop": _late_loop(_new_uvloop),
    "threading.Timer": _late_threads,
    "sched": _late_sched,
}
LATE_NOTES = {
    "asyncio": "loop in its own thread",
    "uvloop": "loop in its own thread",
    "sched": "run() in its own thread",
    "threading.Timer": "a thread per timer",
}


def late_unit(name: str, busy: bool, cfg: Config) -> dict:
    m = min(cfg.late_m, 500) if name == "threading.Timer" else cfg.late_m
    targets = _late_targets(m, cfg.late_span)
    lat: list[int] = []
    done = threading.Event()
    gc.collect()
    extra = LATE_PEERS[name](targets, done, lat, busy, cfg.late_span + 10)
    us = [x / 1e3 for x in lat]
    return {
        "workload": "late_busy" if busy else "late_idle",
        "impl": name,
        "n": m,
        "ran": len(us),
        "p50_us": percentile(us, 50),
        "p99_us": percentile(us, 99),
        "max_us": max(us) if us else None,
        "min_us": min(us) if us else None,
        "note": LATE_NOTES.get(name, ""),
        **extra,
    }


# ---------------------------------------------------------------------------
# idle timeouts: N connections, a read pushes one connection's 30 s timeout
# back (the workload timing wheels exist for)


def idle_reads(n: int, k: int) -> list[int]:
    """The connections read, in order: the same for every peer at one N."""
    rng = random.Random(n)
    return [rng.randrange(n) for _ in range(k)]


def _idle_round(peer: P.IdlePeer, chunks: list[list[int]], g: GcCounter) -> int:
    dt = 0
    for c in chunks:
        with g:
            dt += peer.run(c)
        peer.tidy()
    return dt


def idle_unit(cls: type[P.IdlePeer], n: int, cfg: Config) -> dict:
    peer = cls()
    reads = idle_reads(n, cfg.idle_reads)
    # a running loop checks its heap every iteration: a tenth of N reads
    # between two checks keeps the heap as small as a real loop's, give or take
    size = max(100, n // 10) if cls.tidies else len(reads)
    if cls.max_chunk is not None:
        size = min(size, cls.max_chunk)
    chunks = [reads[i : i + size] for i in range(0, len(reads), size)]
    fired0 = P.idle_fired()
    gc.collect()
    g, t0 = GcCounter(), perf_ns()
    with g:
        peer.open(n)
    setup_ns = perf_ns() - t0
    fill = g.as_dict()
    _idle_round(peer, chunks, GcCounter())  # warm-up
    g = GcCounter()
    samples = [_idle_round(peer, chunks, g) / len(reads) for _ in range(cfg.rounds)]
    elapsed_s = (perf_ns() - t0) / 1e9
    t1 = perf_ns()
    peer.close()
    teardown_ns = perf_ns() - t1
    del peer
    gc.collect()
    s = sorted(samples)
    return {
        "workload": "idle",
        "impl": cls.name,
        "n": n,
        "ns": s[len(s) // 2],
        "ns_min": s[0],
        "reads": len(reads),
        "chunk": size,
        "rounds": cfg.rounds,
        "samples": [round(x, 2) for x in samples],
        "setup_ns": setup_ns / n,
        "teardown_ns": teardown_ns / n,
        "fill_gen2": fill["gen2"],
        "open_s": round(elapsed_s, 2),  # from the fill's start to the last read
        "fired": P.idle_fired() - fired0,
        **g.as_dict(),
    }


# ---------------------------------------------------------------------------
# wake-ups while nothing is due


def _wakeup_window(secs: float, tid: int, wakeups=None) -> dict:
    time.sleep(0.1)  # settle
    c0, w0 = ctx_switches(tid), wakeups() if wakeups else None
    t0 = time.monotonic()
    time.sleep(secs)
    dt = time.monotonic() - t0
    out = {"ctx_per_s": (ctx_switches(tid) - c0) / dt, "secs": round(dt, 2)}
    if wakeups:
        out["wakeups_per_s"] = (wakeups() - w0) / dt
    return out


def wakeup_unit(name: str, cfg: Config) -> list[dict]:
    secs = cfg.wakeup_s
    recs = []

    def rec(case, **kw):
        recs.append({"workload": "wakeups", "impl": name, "case": case, **kw})

    if name == "pywheel":
        import pywheel

        before = tids()
        w = pywheel.Wheel()
        time.sleep(0.05)
        new = tids() - before
        tid = new.pop()

        def wake():
            return w.stats()["wakeups"]

        rec("0 timers", **_wakeup_window(secs, tid, wake))
        w.call_later(3600, nop)
        rec("1 timer in 1 h", **_wakeup_window(secs, tid, wake))
        w.close()
    elif name in ("asyncio", "uvloop"):
        loop = asyncio.new_event_loop() if name == "asyncio" else _new_uvloop()
        box = []
        th = threading.Thread(
            target=lambda: (box.append(threading.get_native_id()), loop.run_forever()),
            daemon=True,
        )
        th.start()
        time.sleep(0.05)
        rec("0 timers", **_wakeup_window(secs, box[0]))
        loop.call_soon_threadsafe(loop.call_later, 3600, nop)
        rec("1 timer in 1 h", **_wakeup_window(secs, box[0]))
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        loop.close()
    elif name == "threading.Timer":
        rec("0 timers", note="no thread exists")
        t = threading.Timer(3600, nop)
        t.start()
        time.sleep(0.05)
        rec("1 timer in 1 h", **_wakeup_window(secs, t.native_id))
        t.cancel()
        t.join(5)
    return recs


WAKEUP_PEERS = ["pywheel", "asyncio", "uvloop", "threading.Timer"]


# ---------------------------------------------------------------------------
# the Akka.NET scheduler stress test: producers keep adding repeating jobs
# (batches of 200, then a 40 ms pause) for a fixed time; every job repeats
# every 20 ms.  The wheel saturates: invocations/s is its capacity.

INTERVAL = 0.020


def _stress_pywheel(cfg: Config, secs: float, on_mid, stop_at_mid: bool) -> dict:
    import pywheel

    w = pywheel.Wheel()
    stop = threading.Event()
    counts = [0] * cfg.stress_producers

    def producer(i):
        ce, b, n = w.call_every, cfg.stress_batch, 0
        while not stop.is_set():
            for _ in range(b):
                ce(INTERVAL, nop)
            n += b
            stop.wait(0.040)
        counts[i] = n

    ths = [threading.Thread(target=producer, args=(i,)) for i in range(cfg.stress_producers)]
    s0, t0 = w.stats()["fired"], time.monotonic()
    for t in ths:
        t.start()
    time.sleep(secs / 2)
    if stop_at_mid:
        stop.set()
        for t in ths:
            t.join()
    s_mid, t_mid = w.stats()["fired"], time.monotonic()
    on_mid()
    time.sleep(secs / 2)
    stop.set()
    for t in ths:
        t.join()
    st, t1 = w.stats(), time.monotonic()
    tc = perf_ns()
    w.close()
    close_ms = (perf_ns() - tc) / 1e6
    return {
        "elapsed": t1 - t0,
        "jobs": sum(counts),
        "invocations": st["fired"] - s0,
        "second_half": (st["fired"] - s_mid) / (t1 - t_mid),
        "half_s": t1 - t_mid,
        "skipped_runs": st["skipped_runs"],
        "max_batch": st["max_batch"],
        "late_p99_ms": st["late_p99"] * 1e3,
        "teardown_ms": close_ms,
    }


def _stress_loop(new_loop):
    def run(cfg: Config, secs: float, on_mid, stop_at_mid: bool) -> dict:
        loop = new_loop()
        call_at, now_ = loop.call_at, loop.time
        inv = [0]
        state = {"stop": False, "jobs": 0}

        def tick(when):
            inv[0] += 1
            nxt = when + INTERVAL
            now = now_()
            if nxt <= now:  # skip missed runs, as call_every does
                nxt = now + INTERVAL - (now - when) % INTERVAL
            call_at(nxt, tick, nxt)

        async def producer():
            while not state["stop"]:
                for _ in range(cfg.stress_batch):
                    w0 = now_() + INTERVAL
                    call_at(w0, tick, w0)
                state["jobs"] += cfg.stress_batch
                await asyncio.sleep(0.040)

        async def main():
            tasks = [loop.create_task(producer()) for _ in range(cfg.stress_producers)]
            t0 = time.monotonic()
            await asyncio.sleep(secs / 2)
            if stop_at_mid:
                state["stop"] = True
                await asyncio.gather(*tasks)
            mid, t_mid = inv[0], time.monotonic()
            on_mid()
            await asyncio.sleep(secs / 2)
            state["stop"] = True
            await asyncio.gather(*tasks)
            t1 = time.monotonic()
            return t0, mid, t_mid, t1

        t0, mid, t_mid, t1 = loop.run_until_complete(main())
        tc = perf_ns()
        loop.close()
        return {
            "elapsed": t1 - t0,
            "jobs": state["jobs"],
            "invocations": inv[0],
            "second_half": (inv[0] - mid) / (t1 - t_mid),
            "half_s": t1 - t_mid,
            "teardown_ms": (perf_ns() - tc) / 1e6,
        }

    return run


STRESS_PEERS = {
    "pywheel": _stress_pywheel,
    "asyncio": _stress_loop(asyncio.new_event_loop),
    "uvloop": _stress_loop(_new_uvloop),
}


def stress_unit(name: str, cfg: Config) -> dict:
    run = STRESS_PEERS[name]
    gc.collect()
    g = GcCounter()
    with g:
        r = run(cfg, cfg.stress_s, lambda: None, False)
    gc.collect()
    # again, shorter, under tracemalloc, producers stopping at half time:
    # bytes held per job scheduled, and live-memory growth per invocation over
    # the second half, when only invocations happen (tracemalloc sees live
    # memory: bytes allocated and freed again within a run are not counted)
    mark = {}

    def on_mid():
        mark["mid"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()

    tracemalloc.start()
    m0 = tracemalloc.get_traced_memory()[0]
    rt = run(cfg, cfg.stress_trace_s, on_mid, True)
    m1, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    inv_half = rt["second_half"] * rt["half_s"]
    return {
        "workload": "stress",
        "impl": name,
        **r,
        "schedules_per_s": r["jobs"] / r["elapsed"],
        "invocations_per_s": r["invocations"] / r["elapsed"],
        "gen0": g.counts[0],
        "gen1": g.counts[1],
        "gen2": g.counts[2],
        "traced_jobs": rt["jobs"],
        "traced_invocations": rt["invocations"],
        "bytes_per_job": (mark.get("mid", m1) - m0) / max(1, rt["jobs"]),
        "net_bytes_per_invocation": (m1 - mark.get("mid", m1)) / max(1, inv_half),
        "peak_over_mid_bytes": peak - mark.get("mid", peak),
    }
