"""`limit` bounds a virtual-time run whatever the Timing does: the clock never
reads past `start + limit`, neither by a late wake-up nor by callback cost
(issue 17, finding 2)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pywheel import testing as vt
from pywheel.testing import Timing


def _most(n: int) -> int:
    return n


def _seen(loop, out: list) -> None:
    out.append(loop.time())


async def _steps(n: int, seen: list) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(n):
        seen.append(loop.time())
        await asyncio.sleep(0)
    seen.append(loop.time())


def test_late_wake_up_cannot_carry_the_clock_past_the_limit():
    # The finding: sleep(9.99) under limit=10 woke 1 s late and ended at
    # t=10.99 with no error.
    loop = vt.VirtualEventLoop(limit=10, timing=Timing(max_late=1.0, draw=_most))
    try:
        with pytest.raises(vt.TimeLimitError, match="would pass the limit"):
            loop.run_until_complete(asyncio.sleep(9.99))
        assert loop.time() <= 10.0
    finally:
        loop.close()


def test_late_wake_up_within_the_limit_is_kept():
    t = Timing(max_late=1.0, draw=_most)

    async def main():
        await asyncio.sleep(8.0)
        return asyncio.get_running_loop().time()

    # the sleep starts one iteration (10 µs) in, wakes 1 s late, and its
    # step runs one iteration after that
    assert vt.run(main(), limit=10, timing=t) == 9.00002


def test_callback_cost_cannot_carry_the_clock_past_the_limit():
    # The finding: 30 task steps of 1 s each under limit=10 reached t=30.
    seen: list[float] = []
    with pytest.raises(vt.TimeLimitError, match="carried the clock to the limit"):
        vt.run(_steps(30, seen), limit=10, timing=Timing(max_cost=1.0, draw=_most))
    assert seen and max(seen) <= 10.0
    assert len(seen) <= 12  # stopped at the limit, not after all 30 steps


def test_cost_limit_is_relative_to_start_and_cleanup_stays_at_the_limit():
    loop = vt.VirtualEventLoop(start=100.0, limit=5, timing=Timing(max_cost=1.0, draw=_most))
    seen: list[float] = []
    try:
        with pytest.raises(vt.TimeLimitError):
            loop.run_until_complete(_steps(30, seen))
        assert max(seen) <= 105.0
        # The run after the error (a Runner's cleanup) works, at the limit.
        loop.run_until_complete(asyncio.sleep(0))
        assert loop.time() == 105.0
    finally:
        loop.close()
    assert max(seen) <= 105.0


def test_the_limit_error_replays():
    t = Timing(max_late=1.0, draw=_most)
    for _ in range(3):  # recorded, then replayed twice: the same error
        with pytest.raises(vt.TimeLimitError, match="would pass the limit"):
            vt.run(asyncio.sleep(9.99), limit=10, timing=t)


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 40).map(lambda x: x / 4),
    sleeps=st.lists(st.integers(0, 12).map(lambda x: x / 4), max_size=12),
    steps=st.integers(0, 40),
    max_late=st.sampled_from([0.0, 0.25, 1.0, 3.0]),
    max_cost=st.sampled_from([0.0, 0.25, 1.0]),
    data=st.data(),
)
def test_no_timing_takes_the_clock_past_the_limit(limit, sleeps, steps, max_late, max_cost, data):
    draw = data.draw(st.sampled_from(["most", "random"]))
    fn = _most if draw == "most" else (lambda n: data.draw(st.integers(0, n)))
    timing = Timing(max_late=max_late, max_cost=max_cost, draw=fn)
    seen: list[float] = []

    async def main():
        loop = asyncio.get_running_loop()
        for d in sleeps:
            await asyncio.sleep(d)
            seen.append(loop.time())
            loop.call_soon(_seen, loop, seen)
        await _steps(steps, seen)

    loop = vt.VirtualEventLoop(limit=limit, timing=timing)
    try:
        try:
            loop.run_until_complete(main())
        except vt.TimeLimitError:
            pass
        assert loop.time() <= limit
    finally:
        loop.close()
    assert all(t <= limit for t in seen), (limit, max(seen))
