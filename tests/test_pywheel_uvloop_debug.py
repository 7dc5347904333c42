"""pywheel.uvloop in debug mode warns and names as uvloop does: uvloop is the oracle.

uvloop times each timer and each ready callback on its own and warns on the
'asyncio' logger about one that took longer than slow_callback_duration,
naming it by its repr (``<TimerHandle cb created at file:line>``, or for a
zero-delay timer, which uvloop makes a call_soon, ``<Handle ...>``).  The
same program on pywheel.uvloop must log the same warnings -- one per slow
timer, naming that timer, none for quick timers that ran in one batch, none
naming the loop's own machinery -- and its handles must print the same.

The slow callbacks sleep 0.3 s against a threshold of 0.15 s and the quick
ones 0.02 s (ten due together: 0.2 s in all), so only a stall of more than
0.13 s inside one quick callback could change the outcome.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest

try:
    import uvloop

    from pywheel import uvloop as pwu
except ImportError:
    uvloop = pwu = None

pytestmark = pytest.mark.skipif(
    uvloop is None, reason="uvloop is not installed (pip install 'pywheel[uvloop]')"
)

THRESHOLD = 0.15
SLOW = 0.3
QUICK = 0.02


def slow_timer():
    time.sleep(SLOW)


def slow_soon():
    time.sleep(SLOW)


def quick():
    time.sleep(QUICK)


def other():
    pass


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())


def debug_run(factory, program):
    """Runs program(loop) -> reprs in debug mode; returns (reprs, warnings
    logged on 'asyncio' with their durations blanked)."""
    logger = logging.getLogger("asyncio")
    records = _Records()
    logger.addHandler(records)
    loop = factory()
    try:
        loop.set_debug(True)
        loop.slow_callback_duration = THRESHOLD
        reprs = loop.run_until_complete(program(loop))
    finally:
        loop.close()
        logger.removeHandler(records)
    warnings = [re.sub(r"took \d+\.\d+ seconds", "took N seconds", m) for m in records.messages]
    return reprs, warnings


def both(program):
    return [debug_run(f, program) for f in (uvloop.new_event_loop, pwu.new_event_loop)]


def test_debug_slow_timer_warns_once_naming_the_timer_as_uvloop():
    async def program(loop):
        h = loop.call_later(0.01, slow_timer)
        await asyncio.sleep(0.01 + SLOW + 0.1)
        return [repr(h)]

    (want_reprs, want), (got_reprs, got) = both(program)
    assert len(want) == 1 and "<TimerHandle slow_timer created at" in want[0]
    assert got == want
    assert got_reprs == want_reprs


def test_debug_quick_timers_due_together_give_no_warning_as_uvloop():
    async def program(loop):
        hs = [loop.call_later(0.01, quick) for _ in range(10)]
        await asyncio.sleep(0.01 + 10 * QUICK + 0.1)
        return [repr(h) for h in hs]

    (want_reprs, want), (got_reprs, got) = both(program)
    assert want == [] and got == []
    assert got_reprs == want_reprs


def test_debug_slow_zero_delay_timer_warns_as_uvloop_names_its_call_soon():
    async def program(loop):
        h = loop.call_later(0, slow_soon)
        g = loop.call_at(loop.time() - 1, quick)
        await asyncio.sleep(SLOW + 0.1)
        return [repr(h), repr(g)]

    (want_reprs, want), (got_reprs, got) = both(program)
    assert len(want) == 1 and "<Handle slow_soon created at" in want[0]
    assert got == want
    assert got_reprs == want_reprs


def test_debug_handle_reprs_as_uvloop():
    def make(loop):
        handles = [
            loop.call_later(10, quick),
            loop.call_at(loop.time() + 10, other),
            loop.call_later(0, quick),
            loop.call_at(0, other),
        ]
        cancelled = [loop.call_later(10, quick), loop.call_later(0, quick)]
        for h in cancelled:
            h.cancel()
        reprs = [repr(h) for h in handles + cancelled]
        handles[0].cancel()
        return [*reprs, repr(handles[0])]

    async def program(loop):
        return make(loop)

    (want_reprs, want), (got_reprs, got) = both(program)
    assert want == got == []
    assert got_reprs == want_reprs
    assert not any("_Debug" in r or "_run_" in r for r in got_reprs)


def test_debug_loop_machinery_is_never_named():
    """A slow timer, a slow zero-delay timer, a batch of quick ones: no
    warning names anything of the loop's own (_run_wheel, _run_soon)."""

    async def program(loop):
        loop.call_later(0.01, slow_timer)
        for _ in range(10):
            loop.call_later(0.01, quick)
        loop.call_later(0, slow_soon)
        await asyncio.sleep(0.01 + 2 * SLOW + 10 * QUICK + 0.1)
        return []

    (_, want), (_, got) = both(program)
    assert sorted(got) == sorted(want) and len(want) == 2
    assert loop_slow_duration_restored()


def loop_slow_duration_restored() -> bool:
    """slow_callback_duration reads as a plain float after runs."""
    loop = pwu.new_event_loop()
    try:
        loop.set_debug(True)
        loop.slow_callback_duration = THRESHOLD

        async def main():
            loop.call_later(0, quick)
            loop.call_later(0.001, quick)
            await asyncio.sleep(0.05)

        loop.run_until_complete(main())
        value = loop.slow_callback_duration
        return type(value) is float and value == THRESHOLD
    finally:
        loop.close()
