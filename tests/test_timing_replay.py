"""A Timing replays exactly or refuses loudly (issue 17, finding 3): a
recording cut short by its draw still replays what it recorded; a loop that
never ran does not use a Timing up; a loop refused because its Timing is in
use leaves nothing unclosed; repr() is the same for the same run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from pywheel import testing as vt
from pywheel.testing import Timing


async def _ticks(n: int = 6) -> list[float]:
    loop = asyncio.get_running_loop()
    out = []
    for _ in range(n):
        await asyncio.sleep(1.0)
        out.append(loop.time())
    return out


class _Stop(Exception):
    pass


def _draw_until(k: int):
    calls = 0

    def draw(n: int) -> int:
        nonlocal calls
        calls += 1
        if calls > k:
            raise _Stop  # as hypothesis ends an example from inside a draw
        return n

    return draw


def test_recording_cut_short_by_its_draw_replays_its_decisions():
    t = Timing(max_late=0.5, draw=_draw_until(3))
    # quantum=0 here and below: exact readings, so the late wake-ups read
    # off the deadlines as they are
    loop = vt.VirtualEventLoop(timing=t, quantum=0)
    seen: list[float] = []

    async def main():
        for _ in range(6):
            await asyncio.sleep(1.0)
            seen.append(loop.time())

    try:
        with pytest.raises(_Stop):
            loop.run_until_complete(main())
    finally:
        loop.close()
    assert seen == [1.5, 3.0, 4.5]
    assert [d[2] for d in t.decisions] == [0.5, 0.5, 0.5]
    assert "recording ended early" in repr(t)
    # The finding: the replay was punctual ([1.0, 2.0, ...]) although repr()
    # listed three late wake-ups.  It replays them, then punctual as the
    # recording played after its draw failed; every replay the same.
    for _ in range(2):
        assert vt.run(_ticks(), timing=t, quantum=0) == [1.5, 3.0, 4.5, 5.5, 6.5, 7.5]


def test_a_loop_that_never_ran_does_not_use_the_timing_up():
    t = Timing(max_late=0.5, draw=lambda n: n)
    vt.VirtualEventLoop(timing=t).close()  # attached, never ran
    assert repr(t) == "Timing(max_late=0.5)"
    # The first loop that runs records (on main: an empty record, replayed
    # punctually by every later run).
    assert vt.run(_ticks(3), timing=t, quantum=0) == [1.5, 3.0, 4.5]
    assert vt.run(_ticks(3), timing=t, quantum=0) == [1.5, 3.0, 4.5]
    assert not t.punctual


def test_a_recording_loop_collected_without_close_leaves_a_replayable_record():
    import gc

    t = Timing(max_late=0.5, draw=lambda n: n)
    loop = vt.VirtualEventLoop(timing=t, quantum=0)
    loop.run_until_complete(_ticks(2))
    loop._self_cycle = loop  # collected by the gc, not by refcount
    del loop
    with pytest.warns(ResourceWarning):
        gc.collect()
    assert vt.run(_ticks(2), timing=t, quantum=0) == [1.5, 3.0]


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_loop_refused_for_a_timing_in_use_leaves_nothing_unclosed():
    r = _child(
        """
        import gc
        from pywheel import testing as vt
        t = vt.Timing(max_late=0.01)
        first = vt.VirtualEventLoop(timing=t)
        try:
            vt.VirtualEventLoop(timing=t)
        except RuntimeError as exc:
            assert "in use" in str(exc)
        else:
            raise AssertionError("not refused")
        gc.collect()
        first.close()
        vt.VirtualEventLoop(timing=t).close()  # free again once closed
        gc.collect()
        print("ok")
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"
    assert r.stderr == ""  # on main: "unclosed event loop" ResourceWarning


class _Waker:
    """A callable object: its default repr carries a memory address."""

    def __init__(self, fut):
        self.fut = fut

    def __call__(self):
        if not self.fut.done():
            self.fut.set_result(None)


async def _wait_for_object_timer():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    # Scheduled from a plain callback, so the timer's site is its callback.
    loop.call_soon(loop.call_later, 1.0, _Waker(fut))
    await fut


def test_repr_has_no_memory_address_and_is_the_same_every_run():
    reprs = []
    for _ in range(2):
        t = Timing(max_late=0.5, draw=lambda n: n)
        vt.run(_wait_for_object_timer(), timing=t)
        reprs.append(repr(t))
    assert "0x" not in reprs[0], reprs[0]
    assert "_Waker object" in reprs[0]
    assert reprs[0] == reprs[1]
