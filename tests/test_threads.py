"""Threads (docs/explanation/guarantees.md, "Threads"): any number of threads
may schedule, cancel and close at once; scheduled == fired + cancelled +
pending holds afterwards, no timer runs twice, every handle ends exactly one
way, and a new earliest deadline arriving while the thread sleeps toward a
far one is never missed (the lost-wakeup races).  Also many threads creating
and dropping wheels at once, and a ManualWheel advanced from two threads
(docs/explanation/guarantees.md, "Limits": one may be refused, no timer runs twice or is lost).
The heavy variant carries @pytest.mark.slow."""

import collections
import gc
import itertools
import random
import sys
import threading
import time

import pytest
from helpers import (
    Recorder,
    clean_exit,
    conserved,
    lines,
    needs_thread_count,
    run,
    threads_back,
    threads_now,
    wait_for,
)

from pywheel import ManualWheel, Wheel

# ===========================================================================
# 3. Concurrency: stress, lost wake-up, first-use race
# ===========================================================================


def _stress(n_threads: int, ops: int, seed: int, switch_interval: float = 1e-4):
    """n_threads Python threads schedule and cancel at random against one
    threaded wheel while it fires; some callbacks cancel, schedule and release
    the GIL themselves.  A short switch interval shakes the interleavings.
    Returns a summary; asserts the invariants."""
    w = Wheel()
    rec = Recorder()
    w.set_exception_handler(rec)
    runs = []  # (id, monotonic) appended by the wheel thread
    handles = []  # (id, handle, kind) appended by any thread
    ids = itertools.count()  # next() on it is atomic under the GIL
    cancel_true = [[] for _ in range(n_threads + 1)]  # the last: the wheel thread's
    failures = []
    barrier = threading.Barrier(n_threads)

    def cb(i, spawn):
        runs.append((i, time.monotonic()))
        if spawn and i % 7 == 0 and handles:  # the wheel thread cancels one
            j, h, _ = handles[(i * 31) % len(handles)]
            if h.cancel():
                cancel_true[-1].append(j)
        if spawn and i % 11 == 0:  # ... schedules one (which spawns nothing)
            k = next(ids)
            handles.append((k, w.call_later(0.001, cb, k, False), "once"))
        if i % 13 == 0:
            time.sleep(0)  # ... and lets the schedulers in mid-batch

    def worker(t):
        rng = random.Random(seed * 1000 + t)
        mine = cancel_true[t]
        try:
            barrier.wait(10)
            for _ in range(ops):
                r = rng.random()
                if r < 0.45:
                    i = next(ids)
                    delay = rng.choice([0, -0.01, rng.uniform(0, 0.02), rng.uniform(0, 0.002), 60])
                    handles.append((i, w.call_later(delay, cb, i, True), "once"))
                elif r < 0.48:
                    i = next(ids)
                    h = w.call_every(rng.uniform(0.002, 0.02), cb, i, False)
                    handles.append((i, h, "every"))
                else:
                    if not handles:
                        continue
                    i, h, _ = handles[rng.randrange(len(handles))]
                    if h.cancel():
                        mine.append(i)
                if rng.random() < 0.01:
                    time.sleep(0.0005)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        sys.setswitchinterval(old_interval)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert failures == []

    # stop the repeating timers, then let every finite one-shot run
    for i, h, kind in list(handles):
        if kind == "every" and h.cancel():
            cancel_true[0].append(i)
    far = sum(1 for _, h, kind in handles if kind == "once" and h.when() > w.time() + 30)
    assert wait_for(lambda: len(w) <= far, timeout=30), (len(w), far)
    # let a run that was in flight finish, then close
    time.sleep(0.05)
    closed = {id(h) for h in w.close(timeout=30)}
    kinds = {i: kind for i, _, kind in handles}
    assert len(kinds) == len(handles), "an id was used twice"
    id_of = {id(h): i for i, h, _ in handles}
    closed_ids = {id_of[k] for k in closed}

    s = w.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"], s
    assert s["pending"] == 0 and len(w) == 0
    assert rec.contexts == [], rec.contexts[:3]
    assert s["errors"] == 0
    assert s["fired"] == len(runs)

    ran = collections.Counter(i for i, _ in runs)
    stopped = collections.Counter(i for mine in cancel_true for i in mine)
    assert all(c == 1 for c in stopped.values()), "cancel() returned True twice"
    once = [i for i, k in kinds.items() if k == "once"]
    for i in once:
        assert ran[i] <= 1, f"one-shot {i} fired {ran[i]} times"
        outcomes = (ran[i] == 1) + (stopped[i] == 1) + (i in closed_ids)
        assert outcomes == 1, (i, ran[i], stopped[i], i in closed_ids)
    every = [i for i, k in kinds.items() if k == "every"]
    for i in every:
        assert (stopped[i] == 1) + (i in closed_ids) == 1, i
    # never early
    when_of = {}
    for i, h, _ in handles:
        when_of[i] = h.when()
    for i, t in runs:
        if kinds[i] == "once":
            assert t >= when_of[i]
    # every cancel of a pending one-shot is counted, and nothing else is
    once_cancelled = sum(1 for i in once if stopped[i] or i in closed_ids)
    assert once_cancelled <= s["cancelled"] <= once_cancelled + len(every)
    return {
        "scheduled": s["scheduled"],
        "fired": s["fired"],
        "cancelled": s["cancelled"],
        "handles": len(handles),
        "one_shots": len(once),
        "repeating": len(every),
        "max_batch": s["max_batch"],
    }


def test_stress_8_threads_schedule_and_cancel():
    summary = _stress(8, 400, seed=1)
    assert summary["fired"] > 0 and summary["cancelled"] > 0


@pytest.mark.slow
def test_stress_8_threads_schedule_and_cancel_heavy():
    for seed in range(2):
        summary = _stress(8, 60_000, seed=seed)
        assert summary["fired"] > 0 and summary["cancelled"] > 0


def test_lost_wakeup_far_deadline_then_1ms_from_another_thread():
    # The thread sleeps toward a deadline 10 s away (first half) or with
    # nothing pending (second half) when a 1 ms timer arrives from another
    # thread: it must wake for it.
    rng = random.Random(7)
    with Wheel() as w:
        far = w.call_later(10, print, "never")
        latencies = []
        for trial in range(30):
            if trial == 15:
                assert far.cancel()
            time.sleep(rng.uniform(0.001, 0.02))  # settle, at a random phase
            fired = threading.Event()
            t0 = time.monotonic()
            th = threading.Thread(target=w.call_later, args=(0.001, fired.set))
            th.start()
            assert fired.wait(5), f"trial {trial}: the wake-up was lost"
            latencies.append(time.monotonic() - t0)
            th.join()
        assert max(latencies) < 2, latencies


def test_lost_wakeup_race_many_producers():
    # Two producers add 0-2 ms timers at random phases while the wheel's
    # only other timer is 10 s away: every one of them fires within a second
    # of its deadline (a lost wake-up would make it wait for the far one).
    with Wheel() as w:
        w.call_later(10, print, "never")
        lateness = []
        lock = threading.Lock()

        def producer(seed):
            rng = random.Random(seed)
            for _ in range(400):
                box = []

                def fire(box=box):
                    with lock:
                        lateness.append(time.monotonic() - box[0].when())

                box.append(w.call_later(rng.choice([0, 0.001, 0.002, rng.uniform(0, 0.002)]), fire))
                if rng.random() < 0.5:
                    time.sleep(rng.uniform(0, 0.002))

        ps = [threading.Thread(target=producer, args=(s,)) for s in range(2)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(60)
        assert wait_for(lambda: len(lateness) == 800, timeout=5), len(lateness)
        assert max(lateness) < 1.0, max(lateness)
        assert min(lateness) >= 0


def test_first_use_race_many_threads_on_a_new_wheel():
    # Many threads make their very first call on a brand-new wheel at once.
    for rnd in range(10):
        w = Wheel()
        n = 12
        barrier = threading.Barrier(n)
        fired = [threading.Event() for _ in range(n)]
        errors = []

        def first(i, w=w, barrier=barrier, fired=fired, errors=errors):
            try:
                barrier.wait(10)
                op = i % 4
                if op == 0:
                    w.call_later(0, fired[i].set)
                elif op == 1:
                    w.call_at(w.time(), fired[i].set)
                elif op == 2:
                    box = []
                    box.append(w.call_every(0.001, lambda: (fired[i].set(), box[0].cancel())))
                else:
                    len(w), w.stats(), repr(w)
                    w.call_later(0.001, fired[i].set)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=first, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(10)
        assert errors == []
        assert all(f.wait(5) for f in fired), f"round {rnd}: a first call was lost"
        assert wait_for(lambda w=w: len(w) == 0)
        assert conserved(w)
        w.close()


def test_many_threads_create_wheels_at_once():
    gc.collect()
    threads = threads_now()
    n = 8
    barrier = threading.Barrier(n)
    ok = []

    def make():
        barrier.wait(10)
        for _ in range(20):
            w = Wheel()
            ev = threading.Event()
            w.call_later(0, ev.set)
            ok.append(ev.wait(5))
            if len(ok) % 3 == 0:
                w.close()
            # else dropped with the thread still running

    ts = [threading.Thread(target=make) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert ok == [True] * (n * 20)
    gc.collect()
    assert threads_back(threads, timeout=20)


def test_concurrent_close_and_schedule():
    # Closers race schedulers: every handle obtained ran, or is in the one
    # list close() returned; nothing ran twice.
    for rnd in range(3):
        w = Wheel()
        handles = {}  # id -> handle
        ran = []
        lists = []
        stop_scheduling = threading.Event()
        ids = itertools.count()

        def scheduler(seed, w=w, handles=handles, ran=ran, stop=stop_scheduling, ids=ids):
            rng = random.Random(seed)
            while not stop.is_set():
                i = next(ids)
                try:
                    handles[i] = w.call_later(rng.choice([0, 0.001, 5]), ran.append, i)
                except RuntimeError:
                    return

        def closer(w=w, lists=lists):
            time.sleep(0.02)
            lists.append(w.close())

        ss = [threading.Thread(target=scheduler, args=(rnd * 10 + s,)) for s in range(3)]
        cs = [threading.Thread(target=closer) for _ in range(3)]
        for t in ss + cs:
            t.start()
        for t in cs:
            t.join(30)
        stop_scheduling.set()
        for t in ss:
            t.join(30)
        assert w.closed
        assert len(lists) == 3
        assert sum(1 for lst in lists if lst) <= 1, "two close() calls returned handles"
        closed = {id(h) for lst in lists for h in lst}
        ran_ids = collections.Counter(ran)
        assert all(c == 1 for c in ran_ids.values())
        assert set(ran_ids) <= set(handles)
        for i, h in handles.items():
            assert (ran_ids[i] == 1) + (id(h) in closed) == 1, i
            assert h.cancelled() is (id(h) in closed)
        assert conserved(w)
        assert w.stats()["pending"] == 0


def test_manual_wheel_advanced_from_two_threads():
    # Two threads advance one ManualWheel whose callbacks release the GIL:
    # one may be refused (RuntimeError), but no timer runs twice, none is
    # lost, and time never goes backwards.
    w = ManualWheel()
    n = 400
    ran = collections.Counter()
    times = []

    def cb(i):
        times.append(w.time_ns())
        ran[i] += 1
        time.sleep(0)  # let the other thread in

    for i in range(n):
        w.call_at(0.001 * (i % 100 + 1), cb, i)
    refused = []

    def advancer():
        for _ in range(50):
            try:
                w.advance(0.001)
            except RuntimeError:
                refused.append(1)

    ts = [threading.Thread(target=advancer) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    w.advance(1)  # whatever a refused advance left due
    assert sorted(ran) == list(range(n))
    assert set(ran.values()) == {1}
    assert times == sorted(times), "time went backwards inside callbacks"
    assert conserved(w)


# ---------------------------------------------------------------------------
# many wheels


@needs_thread_count
def test_many_wheels_created_and_dropped_from_many_threads():
    # 1000 wheels from 4 threads, dropped in every state: idle, with timers
    # pending, while a callback runs, from inside their own callback, closed.
    # Every wheel thread goes away: the thread count returns to its baseline.
    proc = run(
        """
        gc.collect()
        base = thread_count()

        def churn(seed):
            for i in range(250):
                w = pywheel.Wheel()
                kind = (seed + i) % 5
                if kind == 1:
                    w.call_later(60, say, "never")
                    w.call_every(0.001, lambda: None)
                elif kind == 2:
                    ev = threading.Event()
                    w.call_later(0, lambda ev=ev: (ev.set(), time.sleep(0.005)))
                    ev.wait(5)  # dropped while its callback runs
                elif kind == 3:
                    box = {"w": w}
                    ev = threading.Event()
                    box["w"].call_later(0, lambda box=box, ev=ev: (box.clear(), ev.set()))
                    del w
                    ev.wait(5)
                    continue
                elif kind == 4:
                    w.call_later(0, lambda: None)
                    w.close()
                del w

        ts = [threading.Thread(target=churn, args=(s,)) for s in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        gc.collect()
        say("back to baseline", wait_for(lambda: thread_count() == base, timeout=20))
        """,
        timeout=60,
    )
    clean_exit(proc)
    assert lines(proc) == ["back to baseline True"]
    assert proc.stderr == ""
