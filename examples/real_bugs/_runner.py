"""Runs inside a corpus venv (see _venv.py): one check of one bug, its
answer as one JSON line on stdout.

    python _runner.py stock NAME         # the bug on the stock loop, no pywheel
    python _runner.py punctual NAME      # the property on virtual time, punctual
    python _runner.py hunt NAME N        # timings(): find, shrink, replay
    python _runner.py survive NAME N     # timings(): N examples must all pass
"""

import json
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


#: Real seconds one run may take; past that it is reported as a hang (a
#: run that spins on virtual time without letting it move, as a busy loop
#: would on a real one), which fails the property like any exception.
RUN_SECONDS = 30
#: Address space a check may use: a runaway run must not take the machine.
MEMORY = 4 << 30


class Hang(Exception):
    pass


def _alarm(signum, frame):
    # Raised inside a gc callback or a __del__ it is only printed, so keep
    # raising, once a second, until it lands where it stops the run.
    signal.alarm(1)
    raise Hang(f"the run did not finish in {RUN_SECONDS} s of real time")


def _violation(fn):
    """None if fn() passes; what went wrong if it raises."""
    signal.alarm(RUN_SECONDS)
    try:
        fn()
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

    from hypothesis import HealthCheck, Phase, find, given, settings
    from hypothesis.errors import NoSuchExample

    from examples.real_bugs import BOUNDS, LIMIT
    from pywheel import testing

    def run(timing):
        testing.run(bug.scenario(), timing=timing, limit=LIMIT)

    if mode == "punctual":
        out["violation"] = _violation(lambda: run(None))
        return out
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
        @given(testing.timings(**BOUNDS))
        def fixed_survives(timing):
            seen.append(timing)
            run(timing)

        t0 = time.perf_counter()
        try:
            fixed_survives()
            out["violation"] = None
        except AssertionError as exc:
            out["violation"] = f"{exc} under {seen[-1]!r}"
        out["examples"] = len(seen)
        out["seconds"] = time.perf_counter() - t0
        return out

    assert mode == "hunt", mode
    calls = [0, None, None]  # runs, runs until the first failure, when

    def condition(timing) -> bool:
        calls[0] += 1
        bad = _violation(lambda: run(timing)) is not None
        if bad and calls[1] is None:
            calls[1], calls[2] = calls[0], time.perf_counter()
        return bad

    t0 = time.perf_counter()
    try:
        shrunk = find(
            testing.timings(**BOUNDS),
            condition,
            settings=settings(**common, phases=[Phase.generate, Phase.shrink]),
        )
    except NoSuchExample:
        out.update(found=False, examples=calls[0], seconds=time.perf_counter() - t0)
        return out
    t1 = time.perf_counter()
    out.update(
        found=True,
        examples=calls[1],
        runs=calls[0],
        shrink_seconds=t1 - calls[2],
        seconds=t1 - t0,
        shrunk=repr(shrunk),
        decisions=len(shrunk.decisions),
        replay=_violation(lambda: run(shrunk)),
    )
    return out


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    signal.signal(signal.SIGALRM, _alarm)
    try:
        result = main(sys.argv[1:])
    except BaseException as exc:  # report, don't die silently
        result = {"error": "".join(traceback.format_exception(exc))[-3000:]}
    print(json.dumps(result))
