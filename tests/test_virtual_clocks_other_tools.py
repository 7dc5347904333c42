"""Another time tool inside a virtual run: after its block, the program's
clocks follow the loop's virtual time again (issue 27, finding 5).

freezegun ends a block by putting back the functions it captured when it was
imported, the real clocks: on 100056b the rest of the run read real time,
silently.  A restore of what was there before the run now goes under the
virtual clocks (``pywheel.testing._clocks._TimeModule``).  Inside the block
the other tool's frozen clock is what the program reads, as it asked.

And time-machine imported for the first time inside a run no longer
crashes the interpreter.

freezegun and time-machine are optional: the tests that need one skip,
saying so, where it is not installed (freezegun is in the ``test`` extra;
time-machine, a C extension, is not)."""

import asyncio
import datetime
import time

import pytest
from helpers import run_script

from pywheel import testing

CLOCKS = ("monotonic", "perf_counter", "time")
NS_CLOCKS = ("monotonic_ns", "perf_counter_ns", "time_ns")


def _offsets(loop) -> dict:
    """Each clock's reading minus the loop's time: constant while the
    clocks follow the loop."""
    vt = loop.time()
    out = {name: getattr(time, name)() - vt for name in CLOCKS}
    vt_ns = round(vt * 1e9)
    out.update({name: getattr(time, name)() - vt_ns for name in NS_CLOCKS})
    return out


def _assert_follow(before: dict, after: dict) -> None:
    # Within one step a clock read again reads 1 ns later (the clocks never
    # read the same value twice): a few ns apart at most, where a real reading
    # would be apart by the machine's uptime.
    for name in CLOCKS:
        assert after[name] == pytest.approx(before[name], abs=1e-6), name
    for name in NS_CLOCKS:
        assert 0 <= after[name] - before[name] <= 10, (name, before[name], after[name])


def _check_block(block, frozen_wall):
    """Runs a block of the other tool in the middle of a virtual run; returns
    what the clocks read inside it."""

    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(10)
        before = _offsets(loop)
        with block():
            inside = time.time()
        # Same callback, right after the block: no real reading here either.
        _assert_follow(before, _offsets(loop))
        await asyncio.sleep(100)
        _assert_follow(before, _offsets(loop))
        return inside

    inside = testing.run(main())
    if frozen_wall is not None:
        assert inside == frozen_wall
    for name in CLOCKS + NS_CLOCKS + ("sleep",):
        assert getattr(time, name).__module__ in ("time", None), name  # real again


FROZEN = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)


def test_after_a_freezegun_block_the_clocks_follow_the_loop_again():
    freezegun = pytest.importorskip("freezegun", reason="freezegun is not installed")
    _check_block(lambda: freezegun.freeze_time(FROZEN), FROZEN.timestamp())


def test_after_a_freezegun_block_started_before_the_run_the_clocks_follow_the_loop():
    freezegun = pytest.importorskip("freezegun", reason="freezegun is not installed")

    async def main():
        loop = asyncio.get_running_loop()
        freezer.stop()  # a block that began before the run ends inside it
        before = _offsets(loop)
        await asyncio.sleep(100)
        _assert_follow(before, _offsets(loop))

    freezer = freezegun.freeze_time(FROZEN)
    freezer.start()
    try:
        testing.run(main())
    finally:
        if time.time.__module__ not in ("time", None):
            freezer.stop()


def test_after_a_time_machine_block_the_clocks_follow_the_loop_again():
    time_machine = pytest.importorskip("time_machine", reason="time-machine is not installed")
    # time-machine patches the C functions underneath the time module's
    # names: on the loop's thread the virtual clocks stay in front of it
    # (inside the block too, so no frozen value is checked).
    _check_block(lambda: time_machine.travel(FROZEN, tick=False), None)


def test_time_machine_imported_inside_a_run_does_not_crash_the_interpreter():
    """time-machine's C module takes the functions it finds in ``time`` at
    import for C functions: imported while a run goes, it found the virtual
    clocks (Python functions) and its first travel crashed the interpreter
    (SIGSEGV on 100056b, time-machine 3.6).  In a child: a crash is its."""
    pytest.importorskip("time_machine", reason="time-machine is not installed")
    r = run_script(
        """
        import asyncio, datetime, sys, time
        if "time_machine" in sys.modules or "_time_machine" in sys.modules:
            raise SystemExit("time_machine was imported before the run")
        from pywheel import testing

        async def main():
            loop = asyncio.get_running_loop()
            a = time.monotonic() - loop.time()
            import time_machine

            when = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
            with time_machine.travel(when, tick=False):
                assert datetime.datetime.now(datetime.UTC) == when
            await asyncio.sleep(100)
            assert abs(time.monotonic() - loop.time() - a) < 1e-6
            return "ok"

        print(testing.run(main()))
        """
    )
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip() == "ok"


def test_a_clock_put_back_inside_the_run_goes_under_the_virtual_clock(monkeypatch):
    """What freezegun does, with pytest's monkeypatch: a fake set before the
    run, undone inside it, puts back the real function."""
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: 5.0)

    async def main():
        loop = asyncio.get_running_loop()
        monkeypatch.undo()  # time.monotonic = real
        a = time.monotonic() - loop.time()
        await asyncio.sleep(100)
        assert time.monotonic() - loop.time() == pytest.approx(a, abs=1e-6)
        assert time.monotonic() < real() + 1  # read under the virtual clock, not 5.0

    testing.run(main())
    assert time.monotonic is real


def test_a_fake_assigned_inside_the_run_is_what_the_program_reads():
    async def main():
        old = time.monotonic
        time.monotonic = lambda: 5.0
        try:
            assert time.monotonic() == 5.0
        finally:
            time.monotonic = old

    testing.run(main())
