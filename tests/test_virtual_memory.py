"""A long fuzzed run on virtual time holds memory in proportion to what is
pending, not to what it ever scheduled (issue 17, finding 4): with
`max_late > 0` the loop tracks each timer's owner to name late wake-ups, and
a mostly punctual run used to keep every timer handle and task alive."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import weakref

import pywheel.asyncio as pwa
from pywheel import testing as vt
from pywheel.testing import Timing


def _rarely(every: int):
    """A draw that is non-zero once in ``every`` decisions: mostly punctual."""
    count = 0

    def draw(n: int) -> int:
        nonlocal count
        count += 1
        return 1 if count % every == 0 else 0

    return draw


async def _one_sleep():
    await asyncio.sleep(0.01)


def test_finished_tasks_are_not_kept_by_a_fuzzed_loop():
    n = 3000
    refs: list[weakref.ref] = []

    async def main():
        for _ in range(n):
            task = asyncio.ensure_future(_one_sleep())
            refs.append(weakref.ref(task))
            await task
            del task
        gc.collect()
        return sum(r() is not None for r in refs)

    alive = vt.run(main(), timing=Timing(max_late=0.005, draw=_rarely(1000)))
    # On main every one of the 3,000 tasks is still alive here (the timer
    # heap holds each as its timer's owner until a non-zero decision).
    assert alive <= 200, alive


def _grows(program, timing_draw, checkpoints=(4000, 24000)):
    """Traced memory at two points of one run of ``program(stop_at)``."""
    marks: list[int] = []

    async def main():
        await program(checkpoints, marks)

    tracemalloc.start()
    try:
        vt.run(main(), timing=Timing(max_late=0.005, draw=timing_draw))
    finally:
        tracemalloc.stop()
    return marks[1] - marks[0]


async def _sleeper(checkpoints, marks):
    for i in range(checkpoints[-1] + 1):
        await asyncio.sleep(0.01)
        if i in checkpoints:
            gc.collect()
            marks.append(tracemalloc.get_traced_memory()[0])


async def _moved_timeout(checkpoints, marks):
    # An idle timeout pushed back on every read, moved in place
    # (TimerHandle.reschedule, which bypasses call_at): stale entries.
    loop = asyncio.get_running_loop()
    async with pwa.timeout(10.0) as cm:
        for i in range(checkpoints[-1] + 1):
            cm.reschedule(loop.time() + 10.0)
            await asyncio.sleep(0.001)
            if i in checkpoints:
                gc.collect()
                marks.append(tracemalloc.get_traced_memory()[0])


async def _cancelled_timeouts(checkpoints, marks):
    # Request timeouts, almost always cancelled long before they fire.
    loop = asyncio.get_running_loop()
    for i in range(checkpoints[-1] + 1):
        h = loop.call_later(30.0, print)
        await asyncio.sleep(0.001)
        h.cancel()
        if i in checkpoints:
            gc.collect()
            marks.append(tracemalloc.get_traced_memory()[0])


def test_memory_of_a_long_mostly_punctual_run_stays_flat():
    # 20,000 more sleeps between the two marks: on main each left its
    # handle, its heap entry and its recorded 0.0 behind (several MB).
    growth = _grows(_sleeper, _rarely(1000))
    assert growth < 150_000, growth


def test_memory_stays_flat_with_moved_and_cancelled_timers():
    for program in (_moved_timeout, _cancelled_timeouts):
        growth = _grows(program, _rarely(1000))
        assert growth < 150_000, (program.__name__, growth)


def test_moved_timer_still_names_its_site():
    # The owner of a timer moved in place is still found for a late wake-up.
    async def main():
        loop = asyncio.get_running_loop()
        async with pwa.timeout(1.0) as cm:
            for _ in range(5):
                cm.reschedule(loop.time() + 1.0)
                await asyncio.sleep(0.5)
            await asyncio.sleep(5)

    t = Timing(max_late=0.002, draw=lambda n: n)
    try:
        vt.run(main(), timing=t)
    except TimeoutError:
        pass
    sites = {d[3] for d in t.decisions}
    assert sites and all("main()" in s for s in sites), sites
