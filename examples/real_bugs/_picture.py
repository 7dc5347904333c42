"""The picture of one corpus bug's race (docs/explanation/timing-fuzz.md,
"Reading a failure").

    python -m examples.real_bugs._picture NAME [OUTDIR]   # in the bug's cached venv
    python examples/real_bugs/_picture.py NAME OUTDIR      # inside that venv

Finds the first failing Timing (``timings()`` with its default bounds,
hypothesis derandomized, generation only), keeps the decisions the failure
needs (``Timing.minimize``), reruns the punctual run and the minimized one
with a ``Trace`` each, and writes ``OUTDIR/NAME.svg``,
``OUTDIR/NAME.perfetto.json`` and ``OUTDIR/NAME.txt`` (the text timeline
and the Timing).  Default OUTDIR: docs/images.  A bug on another CPython
(psycopg's, 3.12) runs in a venv that has pywheel installed from a tree;
``PYWHEEL_PICTURE_PATH=/a/tree/built/for/3.12`` puts that tree first instead
(how docs/images/psycopg_pool_cancelled_getconn.svg was made: the venv's
psycopg-pool 3.3.0, this tree's pywheel built in place for 3.12)."""

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))


def inside(name: str, outdir: str) -> dict:
    import asyncio
    import importlib

    from hypothesis import HealthCheck, Phase, find, settings

    from examples.real_bugs import LIMIT
    from pywheel import testing

    bug = importlib.import_module(f"examples.real_bugs.{name}")

    def run(timing, trace=None) -> bool:
        """True if the property failed."""
        loop = testing.VirtualEventLoop(timing=timing, limit=LIMIT, trace=trace)
        try:
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                runner.run(bug.scenario())
        except (AssertionError, Exception):
            return True
        return False

    first = find(
        testing.timings(),
        run,
        settings=settings(
            max_examples=300,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate],
        ),
    )
    shrunk = first.minimize(run, rounds=100, seconds=30)
    punctual, failing = testing.Trace("punctual run"), testing.Trace("failing run")
    assert not run(None, punctual), "the punctual run failed"
    assert run(shrunk, failing), "the minimized Timing does not fail when traced"
    os.makedirs(outdir, exist_ok=True)
    base = os.path.join(outdir, name)
    title = f"{name}: {bug.PROMISE}"
    testing.draw_race(punctual, failing, base + ".svg", title=title)
    failing.write_perfetto(base + ".perfetto.json", punctual)
    text = testing.race_timeline(punctual, failing)
    with open(base + ".txt", "w") as f:
        f.write(f"{shrunk!r}\n\n{text}\n")
    return {"timing": repr(shrunk), "timeline": text, "svg": base + ".svg"}


def main(argv) -> None:
    name = argv[0]
    outdir = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(_ROOT, "docs", "images"))
    import subprocess

    from examples.real_bugs import _venv, meta

    python, requirement = meta(name)["BUGGY"]
    vpy = _venv.ensure(requirement, python)
    env = dict(os.environ)
    if os.environ.get("PYWHEEL_PICTURE_PATH"):
        # a tree built for the venv's Python, ahead of what the venv has
        env["PYTHONPATH"] = os.environ["PYWHEEL_PICTURE_PATH"]
    r = subprocess.run(
        [str(vpy), os.path.abspath(__file__), "--inside", name, outdir], cwd=_ROOT, env=env
    )
    sys.exit(r.returncode)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        # As _runner: the tree goes last, so a pywheel installed in the venv wins.
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_ROOT]
        print(json.dumps(inside(sys.argv[2], sys.argv[3])))
    else:
        main(sys.argv[1:])
