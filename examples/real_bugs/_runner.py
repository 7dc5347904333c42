"""Runs inside a corpus venv (see _venv.py): one check of one bug, its
answer as one JSON line on stdout.

    python _runner.py stock NAME         # the bug on the stock loop, no pywheel
    python _runner.py punctual NAME      # the property on virtual time, punctual
    python _runner.py hunt NAME N        # timings(): find, minimize, shrink, replay
    python _runner.py survive NAME N     # timings(): N examples must all pass
"""

import json
import math
import os
import platform
import resource
import signal
import sys
import time
import traceback

# The script's own folder must not shadow the libraries (sys.path[0]); the
# tree goes last, so a pywheel installed in the venv wins over the tree's.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_ROOT]


#: Timers one run may schedule without virtual time moving; past that it
#: is a hang, not a verdict on the property.  Virtual time moves only
#: when nothing is ready (or by the cost a Timing charges a callback, for
#: the first max_draws of them), so a program that keeps re-arming work for
#: "now" spins there forever -- anyio 3.x's CancelScope re-arms its timeout
#: while ``loop.time() < deadline``, and a jump to a deadline rounded to the
#: nanosecond can leave the clock just below it.  On a real loop time moves
#: on and the scenario's own timeout ends the run.  So a hang is dropped
#: (neither a failure nor a pass) and counted in the report.  Counting
#: iterations, not real seconds, keeps the verdict the same on every replay
#: (hypothesis insists on that).
SPIN = 10_000
#: Real seconds all shrinking of a found failure may take, a backstop: the
#: hunt takes the user's path (the first failure minimized by
#: ``Timing.minimize`` within the pytest plugin's default budget, 10 s, then
#: hypothesis's run with the Timing pinned), which needs far less.
SHRINK_SECONDS = 55
#: A backstop in real seconds per run, should a run hang some other way.
RUN_SECONDS = 10
#: Address space a check may use: a runaway run must not take the machine.
MEMORY = 4 << 30


class Hang(BaseException):
    """A BaseException, so neither the library nor the loop swallows it."""


def _alarm(signum, frame):
    # Raised inside a gc callback or a __del__ it is only printed, so keep
    # raising, once a second, until it lands where it stops the run.
    signal.alarm(1)
    raise Hang(f"the run did not finish in {RUN_SECONDS} s of real time")


def _violation(fn):
    """None if fn() passes; what went wrong if it raises.  A Hang is
    re-raised: it says nothing about the property (see RUN_SECONDS)."""
    signal.alarm(RUN_SECONDS)
    try:
        fn()
    except Hang:
        raise
    except AssertionError as exc:
        return str(exc) or "AssertionError"
    except Exception as exc:  # the library broke some other way: a failure too
        return f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
    return None


def main(argv):
    import importlib

    mode, name = argv[0], argv[1]
    bug = importlib.import_module(f"examples.real_bugs.{name}")
    out = {"python": platform.python_version(), "version": bug.installed()}
    if mode == "stock":
        t0 = time.perf_counter()
        out["violation"] = _violation(bug.on_stock)
        out["seconds"] = time.perf_counter() - t0
        return out

    import asyncio

    from hypothesis import HealthCheck, Phase, find, given, reject, settings
    from hypothesis.errors import FlakyStrategyDefinition, NoSuchExample

    from examples.real_bugs import LIMIT
    from pywheel import testing

    class GuardedLoop(testing.VirtualEventLoop):
        """Ends the run with Hang once SPIN timers were scheduled at one
        virtual time (through the loop's own way to end a run from inside
        a callback, so nothing swallows it); the timer that tripped it is
        scheduled for never, so the spinning stops."""

        _spin_at = None
        _spins = 0

        def call_at(self, when, callback, *args, context=None):
            now = self.time()
            if now == self._spin_at:
                self._spins += 1
                if self._spins > SPIN:
                    self._abort(Hang(f"{SPIN} timers scheduled at t={now!r}, time not moving"))
                    when = math.inf
            else:
                self._spin_at, self._spins = now, 0
            return super().call_at(when, callback, *args, context=context)

    def run(timing):
        # No cyclic garbage collection during a run with a Timing: the loop
        # itself keeps the collector off from its first run until it is
        # closed (pywheel/testing/_gc.py says why: an async generator
        # finalized mid-run, as ``async with pool.connection()`` leaves one,
        # made the same draws run differently -- psycopg-pool 3.3.1 stopped
        # with "inconsistent data" after 164 examples).  Hunting, surviving
        # and minimize()'s replays all run such loops.
        loop = GuardedLoop(timing=timing, limit=LIMIT)
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            runner.run(bug.scenario())

    if mode == "punctual":
        out["violation"] = _violation(lambda: run(None))
        return out
    hangs = [0]

    def verdict(timing):
        """The violation, or None; a hang counts as neither (it is dropped)."""
        try:
            return _violation(lambda: run(timing))
        except Hang:
            hangs[0] += 1
            return "hang"

    n = int(argv[2])
    common = dict(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    if mode == "survive":
        seen = []

        @settings(**common, phases=[Phase.generate])
        @given(testing.timings())  # no bound: its defaults (BOUNDS)
        def fixed_survives(timing):
            seen.append(timing)
            v = verdict(timing)
            if v == "hang":
                reject()
            assert v is None, v

        t0 = time.perf_counter()
        try:
            fixed_survives()
            out["violation"] = None
        except AssertionError as exc:
            out["violation"] = f"{exc} under {seen[-1]!r}"
        except FlakyStrategyDefinition:
            # The same draws made a run that drew differently: after a hang
            # (a hang ends a run where the Timing would have drawn on), or a
            # program that is not deterministic given its Timing.
            out["violation"] = None
            out["stopped"] = "hypothesis stopped: inconsistent data" + (
                " (after a hang)" if hangs[0] else " (the same draws made a different run)"
            )
        out["examples"] = len(seen) - hangs[0]
        out["hangs"] = hangs[0]
        out["seconds"] = time.perf_counter() - t0
        return out

    assert mode == "hunt", mode
    # The path a user gets (pywheel's pytest plugin does the same to every
    # @given test, pywheel/testing/_shrink.py): the first failure's Timing
    # is minimized with Timing.minimize (within the plugin's default
    # budget), then hypothesis runs again with timings() playing the
    # minimized decisions, and its result is that run's.  Through find(),
    # as before this path existed: find()'s derandomized examples do not
    # depend on this file's code, so "found after" stays comparable.
    from pywheel.testing import _shrink
    from pywheel.testing._shrink import DEFAULT_MINIMIZE  # the plugin's

    calls = [0, None, None]  # runs, runs until the first failure, when
    failing = []  # the latest failing Timing

    class OutOfShrinkTime(BaseException):
        """Ends find() (hypothesis lets a BaseException through)."""

    def check(timing):
        calls[0] += 1
        v = verdict(timing)
        if v == "hang":
            reject()
        if v is not None:
            failing[:] = [timing]
            if calls[1] is None:
                calls[1], calls[2] = calls[0], time.perf_counter()
        assert v is None, v

    m = _shrink.Minimizing(check, DEFAULT_MINIMIZE)

    def condition(timing) -> bool:
        if failing and time.perf_counter() - calls[2] > SHRINK_SECONDS:
            raise OutOfShrinkTime
        try:
            m(timing)
        except AssertionError:
            return True
        return False

    # One strategy for both runs: the minimized script is handed to it.
    strategy = testing.timings()  # no bound: its defaults (BOUNDS)

    def hunt():
        return find(
            strategy,
            condition,
            settings=settings(**common, phases=[Phase.generate, Phase.shrink]),
        )

    t0 = time.perf_counter()
    shrunk = None
    try:
        try:
            shrunk = hunt()
        except _shrink.Minimized:
            # Second run, the Timing pinned to the minimized decisions.
            try:
                shrunk = hunt()
            except NoSuchExample:
                shrunk = None  # the minimized Timing passes there: report as found
    except OutOfShrinkTime:
        pass
    except FlakyStrategyDefinition:
        if not failing:
            out.update(
                found=False,
                stopped="hypothesis stopped: inconsistent data"
                + (" (after a hang)" if hangs[0] else " (the same draws made a different run)"),
                examples=calls[0],
                hangs=hangs[0],
                seconds=time.perf_counter() - t0,
            )
            return out
    except NoSuchExample:
        out.update(found=False, examples=calls[0], hangs=hangs[0], seconds=time.perf_counter() - t0)
        return out
    finally:
        m.reset()
    if shrunk is None:
        shrunk = failing[0]
    t1 = time.perf_counter()
    before, after, took, reruns = m.done if m.done is not None else (None, None, 0.0, 0)
    out.update(
        found=True,
        examples=calls[1],
        runs=calls[0],
        shrink_seconds=t1 - calls[2],
        minimize_seconds=took,
        seconds=t1 - t0,
        shrunk=repr(shrunk),
        found_decisions=before,
        decisions=len(shrunk.decisions),
        replay=verdict(shrunk),
        hangs=hangs[0],
    )
    return out


if __name__ == "__main__":
    # Under AddressSanitizer (make sanitize preloads it into every process)
    # the shadow memory alone is terabytes of address space: no cap there.
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    signal.signal(signal.SIGALRM, _alarm)
    try:
        result = main(sys.argv[1:])
    except BaseException as exc:  # report, don't die silently
        result = {"error": "".join(traceback.format_exception(exc))[-3000:]}
    print(json.dumps(result))
