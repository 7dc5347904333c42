"""Runs inside a corpus venv (see _venv.py): one check of one bug, its
answer as one JSON line on stdout.

    python _runner.py stock NAME         # the bug on the stock loop, no pywheel
    python _runner.py punctual NAME      # the property on virtual time, punctual
    python _runner.py hunt NAME N        # timings(): find, shrink, replay
    python _runner.py survive NAME N     # timings(): N examples must all pass
"""

import json
import os
import sys
import time
import traceback

# The script's own folder must not shadow the libraries (sys.path[0]); the
# tree goes last, so a pywheel installed in the venv wins over the tree's.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_ROOT]


def _violation(fn):
    """None if fn() passes; the assertion's message if it fails."""
    try:
        fn()
    except AssertionError as exc:
        return str(exc) or "AssertionError"
    return None


def main(argv):
    import importlib

    mode, name = argv[0], argv[1]
    bug = importlib.import_module(f"examples.real_bugs.{name}")
    out = {"python": "%d.%d.%d" % sys.version_info[:3], "version": bug.installed()}
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
    try:
        result = main(sys.argv[1:])
    except BaseException as exc:  # report, don't die silently
        result = {"error": "".join(traceback.format_exception(exc))[-3000:]}
    print(json.dumps(result))
