"""The implementations measured side by side, behind one small interface.

Each timed loop is a plain Python ``for`` loop over a prepared list, with
every method bound once before the clock starts, so that every
implementation pays the same loop overhead as the floor it is compared with.
Handles returned by the measured calls are dropped, never collected into a
list, inside the timed region.

Bookkeeping between rounds keeps the pending count at N and memory recycled:
``take(k)`` hands out k pending handles spread through memory (a random
sample; for the heap-based peers the heap array's tail, which is as scattered
and can be removed in O(k) without breaking the heap), ``release`` cancels
and frees them, so the next round's allocations reuse those slots instead of
faulting in fresh pages (first touches are expensive on some VMs and would
otherwise dominate the nanoseconds measured here).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import sched
import threading
import time
from collections import deque
from operator import attrgetter

from .util import mono_ns, nop, perf_ns

POOL_SIZE = 1 << 16
_rng = random.Random(20240601)
#: Delays of the N pre-filled timers and of the measured schedule calls: far
#: enough that nothing fires during a measurement, spread over 1000 s.
POOL = [1000.0 + 1000.0 * _rng.random() for _ in range(POOL_SIZE)]
#: Delays of the schedule+cancel pairs: later than every pending timer and
#: increasing, so the heap-based peers keep them at the tail (see module doc).
PAIR_DELAYS = sorted(3000.0 + 1000.0 * _rng.random() for _ in range(POOL_SIZE))


def fill_delays(n: int):
    return itertools.islice(itertools.cycle(POOL), n)


def time_schedule(call_later, delays) -> int:
    """ns to schedule a no-op at each delay: the loop every loop-like peer
    (pywheel, asyncio, uvloop) is timed with, so they are timed alike."""
    cb = nop
    t = perf_ns()
    for d in delays:
        call_later(d, cb)
    return perf_ns() - t


def time_pair(call_later, delays) -> int:
    """ns to schedule and at once cancel a no-op at each delay."""
    cb = nop
    t = perf_ns()
    for d in delays:
        call_later(d, cb).cancel()
    return perf_ns() - t


class Peer:
    name = "?"
    #: largest N it is measured at (None: every N)
    max_n: int | None = None
    #: largest N for the firing workloads (None: max_n)
    max_fire_n: int | None = None
    floor = False
    #: a rough fill cost (ns per timer) used before a measured one exists
    est_fill_ns = 5000

    def unavailable(self) -> str | None:
        return None

    # -- lifecycle ---------------------------------------------------------
    def open(self) -> None: ...

    def fill(self, n: int, keep: bool = True, callbacks=None) -> None:
        """Schedules n timers with pool delays (the setup phase).  With keep
        False the handles are dropped (the scheduler still holds them).
        callbacks: an iterable of n callbacks (default: the no-op for all)."""

    def close(self) -> None: ...

    def pending(self) -> int:
        return 0

    # -- bookkeeping between rounds (untimed) ------------------------------
    def take(self, k: int) -> list:
        return [None] * k

    def release(self, handles: list) -> None: ...

    def note_dropped(self, k: int) -> None:
        """k timers were scheduled by a timed round without keeping handles."""

    def after_cancel(self, handles: list) -> None:
        """Frees what a timed cancel round left behind (lazy deletions)."""

    def after_pairs(self, k: int) -> None: ...

    # -- timed loops: each returns elapsed ns ------------------------------
    def schedule(self, delays: list) -> int:
        raise NotImplementedError

    def pair(self, delays: list) -> int:
        raise NotImplementedError

    def cancel(self, handles: list) -> int:
        raise NotImplementedError


class FloorC(Peer):
    """A pre-bound no-op C method call in the same loop: the floor."""

    name = "floor: C call"
    floor = True

    def schedule(self, delays):
        f = [].clear
        t = perf_ns()
        for _d in delays:
            f()
        return perf_ns() - t

    pair = schedule

    def cancel(self, handles):
        f = [].clear
        t = perf_ns()
        for _h in handles:
            f()
        return perf_ns() - t


class FloorPy(Peer):
    """A no-op Python function called from C (map consumed by a deque)."""

    name = "floor: Py call from C"
    floor = True

    def schedule(self, delays):
        f, d = nop, deque
        t = perf_ns()
        d(map(f, delays), maxlen=0)
        return perf_ns() - t

    pair = cancel = schedule


class _RandomPool(Peer):
    """Peers whose handles are freed by cancel: take a random sample."""

    def open(self):
        self.hs: list = []
        self.rng = random.Random(7)
        self.dropped = 0  # scheduled by timed rounds, handle not kept

    def pending(self):
        return len(self.hs) + self.dropped

    def note_dropped(self, k: int) -> None:
        self.dropped += k

    def take(self, k):
        hs, rng, out = self.hs, self.rng, []
        for _ in range(min(k, len(hs))):
            i = rng.randrange(len(hs))
            hs[i], hs[-1] = hs[-1], hs[i]
            out.append(hs.pop())
        return out

    def release(self, handles):
        for h in handles:
            h.cancel()

    def cancel(self, handles):
        t = perf_ns()
        for h in handles:
            h.cancel()
        return perf_ns() - t


class PyWheel(_RandomPool):
    name = "pywheel"
    est_fill_ns = 1500

    def unavailable(self):
        try:
            import pywheel  # noqa: F401
        except ImportError as e:  # pragma: no cover
            return f"pywheel not importable: {e}"
        return None

    def open(self):
        import pywheel

        super().open()
        self.w = pywheel.Wheel()

    def fill(self, n, keep=True, callbacks=None):
        hs = map(self.w.call_later, fill_delays(n), callbacks or itertools.repeat(nop))
        self.hs.extend(hs) if keep else deque(hs, maxlen=0)

    def close(self):
        self.w.close()
        self.hs = []

    def pending(self):
        return len(self.w)

    def schedule(self, delays):
        return time_schedule(self.w.call_later, delays)

    def pair(self, delays):
        return time_pair(self.w.call_later, delays)


#: pairs (and idle reads) between two uvloop iterations in the timed rounds
UV_SPIN_EVERY = 100


class UvLoop(_RandomPool):
    name = "uvloop"
    est_fill_ns = 6000

    def unavailable(self):
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "uvloop not importable (pip install uvloop, or the bench extra)"
        return None

    def new_loop(self):
        import uvloop

        return uvloop.new_event_loop()

    def open(self):
        super().open()
        self.loop = self.new_loop()

    def fill(self, n, keep=True, callbacks=None):
        hs = map(self.loop.call_later, fill_delays(n), callbacks or itertools.repeat(nop))
        self.hs.extend(hs) if keep else deque(hs, maxlen=0)

    def close(self):
        for h in self.hs:
            h.cancel()
        self.hs = []
        self._spin()
        self.loop.close()

    def _spin(self):
        # uvloop frees a cancelled timer's libuv handle in the loop's next
        # iteration (uv_close): run one, untimed, as a running loop would
        self.loop.run_until_complete(asyncio.sleep(0))

    def release(self, handles):
        super().release(handles)
        self._spin()

    def after_cancel(self, handles):
        self._spin()

    def after_pairs(self, k):
        self._spin()

    def schedule(self, delays):
        return time_schedule(self.loop.call_later, delays)

    def pair(self, delays):
        # A running loop frees cancelled timers every iteration; a round of
        # 10,000 pairs with none in between made each cost 1.7-2.1x more here
        # (676 against 389 ns, 1,278 against 611, at 1e3 pending: the handles
        # waiting for uv_close stay allocated, and the collector walks them;
        # 512 against 379 with it off), a cost no program that runs its loop
        # pays.  So one iteration, untimed, every UV_SPIN_EVERY pairs.
        total = 0
        for i in range(0, len(delays), UV_SPIN_EVERY):
            chunk = delays[i : i + UV_SPIN_EVERY]
            total += time_pair(self.loop.call_later, chunk)
            self._spin()
        return total


class _HeapTail(Peer):
    """Peers keeping a heap list: take/free the heap array's tail."""

    def heap(self) -> list:
        raise NotImplementedError

    def pending(self):
        return len(self.heap())

    def take(self, k):
        return self.heap()[-k:] if k else []

    def _pop_tail(self, handles, dead) -> None:
        heap, k = self.heap(), len(handles)
        tail = heap[-k:] if k else []
        if len(tail) == k and all(a is b for a, b in zip(tail, handles, strict=True)):
            del heap[-k:]
            return
        self._purge(dead)  # pragma: no cover - the tail moved; slow but correct

    def _purge(self, dead) -> None:
        heap = self.heap()
        heap[:] = [e for e in heap if not dead(e)]
        heapq.heapify(heap)


class AsyncioLoop(_HeapTail):
    name = "asyncio"
    est_fill_ns = 8000

    def new_loop(self):
        return asyncio.new_event_loop()

    def open(self):
        self.loop = self.new_loop()

    def heap(self):
        return self.loop._scheduled

    def fill(self, n, keep=True, callbacks=None):
        cbs = callbacks or itertools.repeat(nop)
        deque(map(self.loop.call_later, fill_delays(n), cbs), maxlen=0)

    def close(self):
        for h in self.loop._scheduled:
            h.cancel()
        self.loop._scheduled.clear()
        self.loop.close()

    def _forget(self, handles):
        loop = self.loop
        for h in handles:
            if not h._cancelled:
                h.cancel()
            h._scheduled = False
        # what _run_once does when it drops cancelled handles
        loop._timer_cancelled_count = max(0, loop._timer_cancelled_count - len(handles))

    def release(self, handles):
        self._forget(handles)
        self._pop_tail(handles, attrgetter("_cancelled"))

    after_cancel = release

    def after_pairs(self, k):
        tail = self.heap()[-k:]
        assert all(h._cancelled for h in tail)
        self.release(tail)

    def schedule(self, delays):
        return time_schedule(self.loop.call_later, delays)

    def pair(self, delays):
        return time_pair(self.loop.call_later, delays)

    def cancel(self, handles):
        t = perf_ns()
        for h in handles:
            h.cancel()
        return perf_ns() - t


class Sched(_HeapTail):
    """The stdlib ``sched`` module: a heap of Event tuples; cancel is O(N)."""

    name = "sched"
    est_fill_ns = 4000
    #: run() sleeps (a system call) after every event: ~10k events/s on a
    #: busy 2-core VM, so firing 1e7 would take over a quarter of an hour
    max_fire_n = 10**6

    def open(self):
        self.s = sched.scheduler(time.monotonic, time.sleep)

    def heap(self):
        return self.s._queue

    def fill(self, n, keep=True, callbacks=None):
        cbs = callbacks or itertools.repeat(nop)
        deque(map(self.s.enter, fill_delays(n), itertools.repeat(0), cbs), maxlen=0)

    def close(self):
        self.s._queue.clear()

    def release(self, handles):
        ids = {id(e) for e in handles}
        self._pop_tail(handles, lambda e: id(e) in ids)

    def schedule(self, delays):
        enter, cb = self.s.enter, nop
        t = perf_ns()
        for d in delays:
            enter(d, 0, cb)
        return perf_ns() - t

    def pair(self, delays):
        enter, cancel, cb = self.s.enter, self.s.cancel, nop
        t = perf_ns()
        for d in delays:
            cancel(enter(d, 0, cb))
        return perf_ns() - t

    def cancel(self, handles):
        cancel = self.s.cancel
        t = perf_ns()
        for e in handles:
            cancel(e)
        return perf_ns() - t


class HeapqTuples(_HeapTail):
    """A raw heapq of (when, seq, callback) tuples, inlined in the loop.

    Cancelling adds the entry's sequence number to a set (lazy deletion, the
    heapq documentation's recipe); the runner skips those entries.
    """

    name = "heapq tuples"
    est_fill_ns = 2500

    def open(self):
        self.h: list = []
        self.dead: set = set()
        self.seq = itertools.count()

    def heap(self):
        return self.h

    def fill(self, n, keep=True, callbacks=None):
        push, h, mono, nxt, cb = heapq.heappush, self.h, time.monotonic, self.seq.__next__, nop
        if callbacks is None:
            for d in fill_delays(n):
                push(h, (mono() + d, nxt(), cb))
            return
        for d, cb in zip(fill_delays(n), callbacks, strict=False):
            push(h, (mono() + d, nxt(), cb))

    def close(self):
        self.h.clear()
        self.dead.clear()

    def release(self, handles):
        self._pop_tail(handles, lambda e: e[1] in self.dead)
        for e in handles:
            self.dead.discard(e[1])

    after_cancel = release

    def after_pairs(self, k):
        self.release(self.h[-k:])

    def schedule(self, delays):
        push, h, mono, nxt, cb = heapq.heappush, self.h, time.monotonic, self.seq.__next__, nop
        t = perf_ns()
        for d in delays:
            push(h, (mono() + d, nxt(), cb))
        return perf_ns() - t

    def pair(self, delays):
        push, h, mono, nxt, cb = heapq.heappush, self.h, time.monotonic, self.seq.__next__, nop
        kill = self.dead.add
        t = perf_ns()
        for d in delays:
            e = (mono() + d, nxt(), cb)
            push(h, e)
            kill(e[1])
        return perf_ns() - t

    def cancel(self, handles):
        kill = self.dead.add
        t = perf_ns()
        for e in handles:
            kill(e[1])
        return perf_ns() - t


class ThreadTimer(_RandomPool):
    """threading.Timer: one OS thread per timer, so small counts only."""

    name = "threading.Timer"
    max_n = 1000
    est_fill_ns = 200_000

    def fill(self, n, keep=True, callbacks=None):
        T = threading.Timer
        for d, cb in zip(fill_delays(n), callbacks or itertools.repeat(nop), strict=False):
            t = T(d, cb)
            t.daemon = True
            t.start()
            if keep:
                self.hs.append(t)

    def close(self):
        timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
        for t in timers:
            t.cancel()
        for t in timers:
            t.join(5)
        self.hs = []

    def schedule(self, delays):
        T, cb = threading.Timer, nop
        t = perf_ns()
        for d in delays:
            T(d, cb).start()
        return perf_ns() - t

    def pair(self, delays):
        T, cb = threading.Timer, nop
        t = perf_ns()
        for d in delays:
            x = T(d, cb)
            x.start()
            x.cancel()
        return perf_ns() - t


OP_PEERS = [FloorC, FloorPy, PyWheel, AsyncioLoop, UvLoop, Sched, HeapqTuples, ThreadTimer]


# ---------------------------------------------------------------------------
# firing: N timers all due at one moment, or spread over one second
#
# Every peer gets the same deadlines: a first marker just before T, n-2 no-op
# callbacks at T (or spread over [T, T+1s)), and a last marker just after all
# of them, scheduled first and last so that every peer runs them first and
# last.  Throughput = n / (last - first); lateness is measured against T.


def _filled() -> dict:
    return {"filled": mono_ns(), "cpu0": time.process_time_ns()}


def _result(filled: dict, first: int, last: int, **extra) -> dict:
    return {**filled, "first": first, "last": last, "cpu1": time.process_time_ns(), **extra}


class Fire:
    """Per-peer firing runners.  Each returns the moments (monotonic ns) the
    fill ended and the first and last markers ran, and process CPU time."""

    @staticmethod
    def pywheel(T: float, ds: list[float], end: float):
        import pywheel

        marks = []
        done = threading.Event()

        def first():
            marks.append(mono_ns())

        def last():
            marks.append(mono_ns())
            done.set()

        with pywheel.Wheel() as w:
            ca = w.call_at
            ca(T - 1e-6, first)
            deque(map(ca, ds, itertools.repeat(nop)), maxlen=0)
            ca(end, last)
            filled = _filled()
            done.wait()
            stats = w.stats()
        return _result(
            filled, marks[0], marks[1], batches=stats["batches"], max_batch=stats["max_batch"]
        )

    @staticmethod
    def _loop(loop, T, ds, end):
        marks = []

        def first():
            marks.append(mono_ns())

        def last():
            marks.append(mono_ns())
            loop.stop()

        # asyncio's and uvloop's clocks: loop.time() (monotonic; uvloop's in ms)
        off = loop.time() - time.monotonic()
        ca = loop.call_at
        ca(T - 1e-6 + off, first)
        deque(map(ca, [d + off for d in ds] if off else ds, itertools.repeat(nop)), maxlen=0)
        ca(end + off, last)
        filled = _filled()
        loop.run_forever()
        res = _result(filled, marks[0], marks[1])
        loop.close()
        return res

    @staticmethod
    def asyncio(T, ds, end):
        return Fire._loop(asyncio.new_event_loop(), T, ds, end)

    @staticmethod
    def uvloop(T, ds, end):
        import uvloop

        return Fire._loop(uvloop.new_event_loop(), T, ds, end)

    @staticmethod
    def sched(T, ds, end):
        marks = []
        s = sched.scheduler(time.monotonic, time.sleep)
        s.enterabs(T - 1e-6, 0, lambda: marks.append(mono_ns()))
        deque(map(s.enterabs, ds, itertools.repeat(0), itertools.repeat(nop)), maxlen=0)
        s.enterabs(end, 0, lambda: marks.append(mono_ns()))
        filled = _filled()
        s.run()
        return _result(filled, marks[0], marks[1])

    @staticmethod
    def heapq(T, ds, end):
        marks = []
        h: list = []
        push, seq = heapq.heappush, itertools.count()
        push(h, (T - 1e-6, next(seq), lambda: marks.append(mono_ns())))
        for d in ds:
            push(h, (d, next(seq), nop))
        push(h, (end, next(seq), lambda: marks.append(mono_ns())))
        filled = _filled()
        pop, mono, sleep = heapq.heappop, time.monotonic, time.sleep
        now = mono()
        while h:
            if h[0][0] > now:
                now = mono()
                if h[0][0] > now:
                    sleep(h[0][0] - now)
                    now = mono()
                continue
            pop(h)[2]()
        return _result(filled, marks[0], marks[1])

    @staticmethod
    def threading(T, ds, end):
        stamps: list[int] = []
        n = len(ds) + 2
        done = threading.Event()
        lock = threading.Lock()

        def cb():
            with lock:
                stamps.append(mono_ns())
                if len(stamps) == n:
                    done.set()

        now = time.monotonic()
        timers = [threading.Timer(w - now, cb) for w in [T - 1e-6, *ds, end]]
        for t in timers:
            t.start()
        filled = _filled()
        done.wait()
        res = _result(filled, min(stamps), max(stamps))
        for t in timers:
            t.join(5)
        return res


FIRE_PEERS = {
    "pywheel": (Fire.pywheel, PyWheel),
    "asyncio": (Fire.asyncio, AsyncioLoop),
    "uvloop": (Fire.uvloop, UvLoop),
    "sched": (Fire.sched, Sched),
    "heapq tuples": (Fire.heapq, HeapqTuples),
    "threading.Timer": (Fire.threading, ThreadTimer),
}
# peers whose timers run by themselves while the benchmark is still filling
THREADED = {"pywheel", "threading.Timer"}


# ---------------------------------------------------------------------------
# idle timeouts: N connections, each with a 30 s timeout that every read of
# that connection pushes back.  The timers stay 30 s away, so none fires.
#
# The event loops are never run during the reads (Timeout.reschedule only
# needs one to be *the* running loop), so their timers cannot fire however
# long the fill of N takes; between chunks of reads the bookkeeping a running
# loop would do is done untimed: asyncio's purge of cancelled handles (its own
# rule, below), one uvloop iteration to free cancelled timers.

IDLE_TIMEOUT = 30.0
_idle_fired = [0]


def idle_expired(*_args) -> None:
    """Every idle peer's timer callback: counts the timers that fired."""
    _idle_fired[0] += 1


def idle_fired() -> int:
    return _idle_fired[0]


def time_cancel_new(hs: list, call_later, reads) -> int:
    """ns to cancel connection i's timer and schedule a new one, per read i:
    the loop every cancel+new peer (pywheel, asyncio, uvloop) is timed with."""
    cb, d = idle_expired, IDLE_TIMEOUT
    t = perf_ns()
    for i in reads:
        hs[i].cancel()
        hs[i] = call_later(d, cb)
    return perf_ns() - t


def _idle_fill(loop, n: int) -> list:
    """n timers IDLE_TIMEOUT away on an event loop: the connections' handles."""
    return list(
        map(loop.call_later, itertools.repeat(IDLE_TIMEOUT, n), itertools.repeat(idle_expired))
    )


class IdlePeer:
    name = "?"
    #: what --impl and the availability checks know it by
    family = "?"
    floor = False
    #: run the reads in chunks with tidy() between them (untimed)
    tidies = False
    #: at most this many reads in a chunk (None: the workload's N // 10)
    max_chunk: int | None = None
    #: its timers fire by themselves (a thread, a loop iteration in tidy()):
    #: the fill and the reads must end well within IDLE_TIMEOUT
    can_fire = False
    #: rough setup+teardown ns and bytes per connection, before measured ones
    est_ns = 5000
    est_bytes = 500

    def open(self, n: int) -> None:
        """The setup: n connections, each with a timer IDLE_TIMEOUT away."""

    def run(self, reads: list) -> int:
        """The timed loop: one read per index in reads; elapsed ns."""
        raise NotImplementedError

    def tidy(self) -> None:
        """Untimed, between chunks: what a running loop would do meanwhile."""

    def close(self) -> None:
        """The teardown: cancel every connection's timer, free everything."""


class IdleFloor(IdlePeer):
    """A pre-bound C method with the same arguments in the same loop."""

    name = "floor: C call"
    family = "floor"
    floor = True
    est_ns = 10
    est_bytes = 8

    def open(self, n):
        self.xs = [0] * n

    def run(self, reads):
        setitem, d = self.xs.__setitem__, IDLE_TIMEOUT
        t = perf_ns()
        for i in reads:
            setitem(i, d)
        return perf_ns() - t

    def close(self):
        self.xs = None


class IdleWheelReschedule(IdlePeer):
    """``handle.reschedule_later(30)`` on a threaded ``pywheel.Wheel``."""

    name = "pywheel reschedule"
    family = "pywheel"
    can_fire = True
    est_ns = 1000
    est_bytes = 120

    def open(self, n):
        import pywheel

        self.w = pywheel.Wheel()
        self.hs = list(
            map(
                self.w.call_later, itertools.repeat(IDLE_TIMEOUT, n), itertools.repeat(idle_expired)
            )
        )

    def run(self, reads):
        hs, d = self.hs, IDLE_TIMEOUT
        t = perf_ns()
        for i in reads:
            hs[i].reschedule_later(d)
        return perf_ns() - t

    def close(self):
        self.w.close()
        self.hs = None


class IdleWheelCancelNew(IdleWheelReschedule):
    """``handle.cancel()`` then ``wheel.call_later(30, cb)`` on a ``pywheel.Wheel``."""

    name = "pywheel cancel+new"

    def run(self, reads):
        return time_cancel_new(self.hs, self.w.call_later, reads)


class IdleLoopReschedule(IdlePeer):
    """``h.reschedule(loop.time() + 30)`` on handles from a ``WheelEventLoop``."""

    name = "WheelEventLoop reschedule"
    family = "pywheel"
    est_ns = 2000
    est_bytes = 120

    def open(self, n):
        from pywheel.asyncio import WheelEventLoop

        self.loop = WheelEventLoop()
        self.hs = _idle_fill(self.loop, n)

    def run(self, reads):
        hs, now, d = self.hs, self.loop.time, IDLE_TIMEOUT
        t = perf_ns()
        for i in reads:
            hs[i].reschedule(now() + d)
        return perf_ns() - t

    def close(self):
        self.loop.close()
        self.hs = None


def _purge_like_run_once(loop) -> None:
    """What ``BaseEventLoop._run_once`` does with its heap when more than
    half of it is cancelled handles (and it holds over 100)."""
    from asyncio import base_events as be

    heap = loop._scheduled
    if (
        len(heap) > be._MIN_SCHEDULED_TIMER_HANDLES
        and loop._timer_cancelled_count / len(heap) > be._MIN_CANCELLED_TIMER_HANDLES_FRACTION
    ):
        live = []
        for h in heap:
            if h._cancelled:
                h._scheduled = False
            else:
                live.append(h)
        heapq.heapify(live)
        loop._scheduled = live
        loop._timer_cancelled_count = 0


class IdleAsyncioCancelNew(IdlePeer):
    """``TimerHandle.cancel()`` then ``loop.call_later(30, cb)`` on asyncio."""

    name = "asyncio cancel+new"
    family = "asyncio"
    tidies = True
    est_ns = 5000
    est_bytes = 240

    @staticmethod
    def new_loop():
        return asyncio.new_event_loop()

    def open(self, n):
        self.loop = self.new_loop()
        self.hs = _idle_fill(self.loop, n)

    def run(self, reads):
        return time_cancel_new(self.hs, self.loop.call_later, reads)

    def tidy(self):
        _purge_like_run_once(self.loop)

    def close(self):
        for h in self.hs:
            h.cancel()
        self.tidy()
        self.loop.close()
        self.hs = None


class IdleAsyncioTimeout(IdleAsyncioCancelNew):
    """``asyncio.Timeout.reschedule(loop.time() + 30)`` on entered Timeouts
    (each as inside its own ``async with asyncio.timeout(...):``)."""

    name = "asyncio Timeout"
    est_ns = 10_000
    est_bytes = 420

    def open(self, n):
        self.loop = loop = asyncio.new_event_loop()

        async def enter_all():
            ts = [asyncio.Timeout(None) for _ in range(n)]
            for t in ts:
                await t.__aenter__()
            return ts

        # Entered in a task with no deadline, then given one outside any
        # loop iteration: entering with one would let the iteration that ends
        # run_until_complete() fire the first deadlines if the fill of N
        # took longer than the timeout (it does at N=1e7).
        self.ts = loop.run_until_complete(enter_all())
        with self._running():
            for t in self.ts:
                t.reschedule(loop.time() + IDLE_TIMEOUT)

    @contextlib.contextmanager
    def _running(self):
        # reschedule() asks for the running loop; the loop is made that
        # without running an iteration, so none of its timers can fire
        asyncio._set_running_loop(self.loop)
        try:
            yield
        finally:
            asyncio._set_running_loop(None)

    def run(self, reads):
        ts, now, d = self.ts, self.loop.time, IDLE_TIMEOUT
        with self._running():
            t = perf_ns()
            for i in reads:
                ts[i].reschedule(now() + d)
            return perf_ns() - t

    def close(self):
        with self._running():
            for t in self.ts:
                t.reschedule(None)  # what leaving the block does to its timer
        self.loop._scheduled.clear()
        self.loop.close()
        self.ts = None


class IdleUvloopCancelNew(IdleAsyncioCancelNew):
    """``TimerHandle.cancel()`` then ``loop.call_later(30, cb)`` on uvloop."""

    name = "uvloop cancel+new"
    #: reads between two iterations (UV_SPIN_EVERY; see UvLoop.pair)
    max_chunk = UV_SPIN_EVERY
    family = "uvloop"
    can_fire = True  # tidy() runs a loop iteration
    est_ns = 8000
    est_bytes = 550

    @staticmethod
    def new_loop():
        import uvloop

        return uvloop.new_event_loop()

    def tidy(self):
        # uvloop frees a cancelled timer's libuv handle in the next iteration
        self.loop.run_until_complete(asyncio.sleep(0))


IDLE_PEERS = [
    IdleFloor,
    IdleWheelReschedule,
    IdleLoopReschedule,
    IdleWheelCancelNew,
    IdleAsyncioCancelNew,
    IdleAsyncioTimeout,
    IdleUvloopCancelNew,
]
