"""Handles live in their wheel's slabs (csrc/core/slab.h): the collector walks them
in memory order.  What users must not notice: handles outlive their wheel,
memory comes back, tracemalloc still sees it, and cycles through pending
callbacks are still found however many pages they spread over."""

import gc
import random
import tracemalloc
import weakref

import pywheel

PER_PAGE = (64 * 1024 - 256) // 104  # about; several pages below means "many"


def nop():
    pass


def test_handles_outlive_their_wheel_and_their_memory_comes_back():
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        w = pywheel.ManualWheel()
        hs = [w.call_later(10 + i, nop) for i in range(5 * PER_PAGE)]
        held = tracemalloc.get_traced_memory()[0] - before
        assert held >= 100 * len(hs), held / len(hs)  # the slabs are traced
        ran = []
        keep = hs[::7]
        for k in keep:
            k.reschedule(1)
        del k
        w.call_later(1, ran.append, "x")
        assert w.advance(1) == len(keep) + 1
        del w
        gc.collect()
        # the wheel is gone; its handles still answer
        assert all(not h.cancel() for h in hs)
        assert all(h.cancelled() for h in hs if h not in keep)
        assert repr(hs[0]) == "<pywheel.TimerHandle done when=1.0>"
        random.Random(3).shuffle(hs)
        del keep
        while hs:
            hs.pop()
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - before
        assert left < 16 * 1024, left  # every page given back with the last handle
    finally:
        tracemalloc.stop()


def test_interleaved_wheels_free_in_any_order():
    rng = random.Random(5)
    wheels = [pywheel.ManualWheel() for _ in range(3)]
    handles = []
    for _ in range(4 * PER_PAGE):
        w = rng.choice(wheels)
        handles.append((w, w.call_later(rng.uniform(0, 5), nop)))
    rng.shuffle(handles)
    for _, h in handles[: len(handles) // 2]:
        assert h.cancel()
    ran = sum(w.advance(5) for w in wheels)
    assert ran == len(handles) - len(handles) // 2
    assert all(len(w) == 0 for w in wheels)
    del handles
    for w in wheels:
        assert w.close() == []


class Owner:
    def __init__(self, wheel):
        self.wheel = wheel

    def cb(self):
        pass


def test_cycles_through_pending_callbacks_on_many_pages_are_collected():
    gc.collect()
    w = pywheel.Wheel()
    ref = weakref.ref(w)
    owners = [Owner(w) for _ in range(3 * PER_PAGE)]
    for i, o in enumerate(owners):
        w.call_later(3600 + i, o.cb)  # a bound method per timer, each reaching the wheel
    del w, owners, o
    gc.collect()
    assert ref() is None


def test_a_live_wheel_keeps_its_pending_callbacks():
    w = pywheel.ManualWheel()
    refs = []
    for i in range(2 * PER_PAGE):
        o = Owner(w)
        refs.append(weakref.ref(o))
        w.call_later(1 + i % 5, o.cb)
    del o
    gc.collect()
    assert all(r() is not None for r in refs)
    assert w.advance(5) == 2 * PER_PAGE
    gc.collect()
    assert all(r() is None for r in refs)
