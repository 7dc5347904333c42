"""Free-threaded CPython (3.14t, docs/explanation/threading.md, "Free-threaded
builds"): importing pywheel leaves the GIL off and says nothing, and one
Wheel hammered from 8 threads -- schedule, cancel, reschedule, close -- while
its callbacks run in parallel with them keeps every promise: never early, no
lost timer, a cancel() that returned True means the callback never starts,
and the counters agree.  A ManualWheel and a WheelEventLoop are used from
several threads where that is allowed.  Everything but the import check runs
on a build with the GIL too (the promises are the same there); each stress
run takes a second or two."""

import asyncio
import collections
import random
import sys
import sysconfig
import threading
import time

import pytest
from helpers import conserved, run_script

import pywheel
from pywheel import ManualWheel, Wheel

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
N_THREADS = 8


@pytest.mark.skipif(not FREE_THREADED, reason="a build with the GIL has no GIL to leave off")
def test_import_leaves_the_gil_off_and_says_nothing():
    # Run with the warnings on and as errors: a module that did not declare
    # Py_mod_gil would turn the GIL back on with a RuntimeWarning here.
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('error')\n"
        "import pywheel, pywheel.asyncio, pywheel.testing\n"
        "w = pywheel.Wheel(); w.close()\n"
        "print(sys._is_gil_enabled())\n"
    )
    r = run_script(code)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.strip() == "False"


@pytest.mark.skipif(FREE_THREADED, reason="only a build with the GIL has one to check")
def test_gil_build_still_has_its_gil():
    assert getattr(sys, "_is_gil_enabled", lambda: True)()


class _Book:
    """What the threads did, kept under one lock (a list.append is atomic
    on either build; the counters below are read-modify-write)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.handles = {}  # id -> (handle, kind)
        self.order = []  # the same (handle, kind), to pick from at random
        self.runs = []  # (id, monotonic at the start of the run)
        self.cancel_true = collections.Counter()
        self.resched_true = 0
        self.refused = 0  # schedulings refused because the wheel was closed
        self.next_id = 0

    def new_id(self):
        with self.lock:
            self.next_id += 1
            return self.next_id


def _hammer(close_midway: bool, seed: int, ops: int = 20000):
    """N_THREADS threads hammer one Wheel; returns (wheel, book, closed list,
    stats).  With close_midway, the main thread closes the wheel while they
    still schedule, cancel and reschedule; else every finite timer is let
    run, and the wheel closed after."""
    w = Wheel()
    errors = []
    w.set_exception_handler(lambda wheel, ctx: errors.append(ctx))
    book = _Book()
    barrier = threading.Barrier(N_THREADS + 1)
    failures = []
    halfway = threading.Semaphore(0)

    def cb(i, spawn):
        book.runs.append((i, time.monotonic()))
        if spawn and i % 5 == 0:  # callbacks act too, in parallel with the threads
            if book.order:
                h, _ = book.order[(i * 31) % len(book.order)]
                if h.cancel():
                    with book.lock:
                        book.cancel_true[id(h)] += 1
            if i % 10 == 0:
                try:
                    k = book.new_id()
                    book.handles[k] = entry = (w.call_later(0.001, cb, k, False), "once")
                    book.order.append(entry)
                except RuntimeError:
                    with book.lock:
                        book.refused += 1

    def schedule(rng):
        i = book.new_id()
        r = rng.random()
        try:
            if r < 0.06:
                h = w.call_every(rng.uniform(0.002, 0.01), cb, i, False)
                kind = "every"
            else:
                delay = rng.choice([0, -0.01, rng.uniform(0, 0.01), rng.uniform(0, 0.002), 60])
                h = w.call_later(delay, cb, i, True)
                kind = "once"
        except RuntimeError:
            assert w.closed
            with book.lock:
                book.refused += 1
            return
        book.handles[i] = (h, kind)
        book.order.append((h, kind))

    def worker(t):
        rng = random.Random(seed * 100 + t)
        try:
            barrier.wait(30)
            for n in range(ops):
                if n == ops // 2:
                    halfway.release()
                r = rng.random()
                if r < 0.5 or not book.order:
                    schedule(rng)
                    continue
                h, kind = book.order[rng.randrange(len(book.order))]
                if r < 0.8:
                    if h.cancel():
                        with book.lock:
                            book.cancel_true[id(h)] += 1
                elif kind == "once":
                    if h.reschedule_later(rng.choice([0, 0.001, rng.uniform(0, 0.005)])):
                        with book.lock:
                            book.resched_true += 1
                if rng.random() < 0.02:
                    time.sleep(0.0002)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(N_THREADS)]
    for t in threads:
        t.start()
    barrier.wait(30)
    closed = None
    if close_midway:
        for _ in range(N_THREADS):
            assert halfway.acquire(timeout=60)
        closed = w.close(timeout=30)
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert failures == [], failures[:3]
    if not close_midway:
        # stop the repeating timers, let every finite one-shot run, close
        for h, kind in list(book.handles.values()):
            if kind == "every" and h.cancel():
                with book.lock:
                    book.cancel_true[id(h)] += 1

        def far():  # the one-shots pending 60 s ahead (callbacks may still add some)
            ahead = w.time() + 30
            return sum(
                1
                for h, k in list(book.order)
                if k == "once" and not h.cancelled() and h.when() > ahead
            )

        deadline = time.monotonic() + 30
        while len(w) != far() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(w) == far(), (len(w), far())
        closed = w.close(timeout=30)
    assert errors == [], errors[:3]
    return w, book, closed, w.stats()


@pytest.mark.parametrize("close_midway", [False, True], ids=["drain", "close-midway"])
def test_one_wheel_from_8_threads_keeps_its_promises(close_midway):
    w, book, closed, s = _hammer(close_midway, seed=1 + close_midway)
    assert w.closed and len(w) == 0
    closed_ids = collections.Counter(id(h) for h in closed)
    assert all(n == 1 for n in closed_ids.values()), "close() listed a handle twice"
    ran = collections.Counter(i for i, _ in book.runs)
    assert all(n == 1 for n in book.cancel_true.values()), "cancel() returned True twice"
    once = {i: h for i, (h, k) in book.handles.items() if k == "once"}
    every = {i: h for i, (h, k) in book.handles.items() if k == "every"}
    assert once and book.runs
    for i, h in once.items():
        # exactly one end: it ran once, a cancel() stopped it, or close() did;
        # a cancel() that returned True means it never started
        ended = (ran[i] == 1) + book.cancel_true[id(h)] + closed_ids[id(h)]
        assert ran[i] <= 1 and ended == 1, (i, ran[i], book.cancel_true[id(h)], closed_ids[id(h)])
        assert h.cancelled() == (ran[i] == 0)
    for i, h in every.items():
        assert book.cancel_true[id(h)] + closed_ids[id(h)] == 1, i
    # never early: a one-shot's when() is final once it started (reschedule
    # returns False from then on), and every run began at or after it
    for i, t in book.runs:
        if i in once:
            assert t >= once[i].when(), (i, t, once[i].when())
    # the counters agree with what the threads saw
    assert conserved(w), s
    assert s["pending"] == 0 and s["errors"] == 0
    assert s["fired"] == len(book.runs)
    assert s["rescheduled"] == book.resched_true
    one_shots_cancelled = sum(
        1 for h in once.values() if book.cancel_true[id(h)] or closed_ids[id(h)]
    )
    assert one_shots_cancelled <= s["cancelled"] <= one_shots_cancelled + len(every)
    if not close_midway:
        # no lost timer: all that close() found were the far ones
        assert book.refused == 0
        assert all(h.when() > w.time() + 20 for h in closed), "a finite timer never ran"


def test_one_manual_wheel_scheduled_from_threads_while_one_advances():
    # Schedulers on 8 threads, one thread advancing: every timer due by the
    # final time runs exactly once, never before its deadline on the wheel's
    # clock, and scheduled == fired + cancelled + pending.
    w = ManualWheel()
    runs = collections.Counter()
    late = []
    stop = threading.Event()
    made = [[] for _ in range(N_THREADS)]
    cancelled = [[] for _ in range(N_THREADS)]

    def cb(i, when):
        runs[i] += 1
        if w.time() < when:
            late.append((i, w.time(), when))

    def scheduler(t):
        rng = random.Random(t)
        for n in range(5000):
            i = t * 100000 + n
            when = w.time() + rng.uniform(0, 0.05)
            h = w.call_at(when, cb, i, when)
            made[t].append((i, h))
            if rng.random() < 0.2 and h.cancel():
                cancelled[t].append(i)

    def advancer():
        while not stop.is_set():
            w.advance(0.0005)

    adv = threading.Thread(target=advancer)
    adv.start()
    threads = [threading.Thread(target=scheduler, args=(t,)) for t in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    adv.join(120)
    assert not adv.is_alive() and not any(t.is_alive() for t in threads)
    w.advance(1)  # everything is due now
    stopped = {i for c in cancelled for i in c}
    for t in range(N_THREADS):
        for i, _ in made[t]:
            assert runs[i] == (0 if i in stopped else 1), (i, runs[i], i in stopped)
    assert late == []
    s = w.stats()
    assert s["scheduled"] == s["fired"] + s["cancelled"] + s["pending"] == N_THREADS * 5000
    assert s["pending"] == 0 and s["cancelled"] == len(stopped)


def test_manual_wheel_advanced_from_two_threads_refuses_or_runs_once():
    # Two threads advance one ManualWheel at once: a call may be refused
    # (RuntimeError, already advancing), none runs a timer twice or loses one.
    w = ManualWheel()
    runs = collections.Counter()
    n = 20000
    for i in range(n):
        w.call_at(i * 0.0001, runs.update, (i,))
    refused = []
    failures = []

    def advance():
        try:
            for _ in range(2000):
                try:
                    w.advance(0.0001)
                except RuntimeError as e:
                    if "already advancing" not in str(e):
                        raise
                    refused.append(e)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    ts = [threading.Thread(target=advance) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert failures == [], failures[:3]  # (a target read before the other's advance: in the past)
    w.advance_to(n * 0.0001 + 1)
    assert all(runs[i] == 1 for i in range(n)), [i for i in range(n) if runs[i] != 1][:5]
    s = w.stats()
    assert s["fired"] == n and s["pending"] == 0


def test_event_loop_fed_from_8_threads_with_call_soon_threadsafe():
    # The loop runs on this thread; 8 threads hand it timers through
    # call_soon_threadsafe (the thread-safe door asyncio offers).  Every one
    # runs once, at or after its deadline on the loop's clock.
    loop = pywheel.asyncio.new_event_loop()
    per_thread = 300
    seen = collections.Counter()
    early = []
    done = asyncio.Event()

    def fire(i, when):
        if loop.time() < when:
            early.append(i)
        seen[i] += 1
        if sum(seen.values()) == N_THREADS * per_thread:
            done.set()

    def arm(i, delay):
        loop.call_later(delay, fire, i, loop.time() + delay)  # (its time() is read first)

    def feeder(t):
        rng = random.Random(t)
        for n in range(per_thread):
            loop.call_soon_threadsafe(arm, t * 10000 + n, rng.uniform(0, 0.02))
            if rng.random() < 0.05:
                time.sleep(0.0005)

    async def main():
        threads = [threading.Thread(target=feeder, args=(t,)) for t in range(N_THREADS)]
        for t in threads:
            t.start()
        await asyncio.wait_for(done.wait(), 60)
        for t in threads:
            t.join(30)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert early == []
    assert len(seen) == N_THREADS * per_thread and set(seen.values()) == {1}
