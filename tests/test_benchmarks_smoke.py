"""The benchmark suite must not rot: run it at tiny sizes in a subprocess.

`python -m benchmarks --smoke` runs every workload once at tiny N.  The first
test hides the optional extras (uvloop, rloop, matplotlib, tqdm) so that the
fallbacks run whatever is installed; the second runs the uvloop rows and the
plot when those are installed.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import child_env

ROOT = Path(__file__).resolve().parent.parent
HIDE = (
    "import sys; [sys.modules.__setitem__(m, None) "
    "for m in ('uvloop', 'rloop', 'matplotlib', 'tqdm')]; "
)
RUN = "import runpy; runpy.run_module('benchmarks', run_name='__main__')"


def run(code: str, args: list[str], tmp_path: Path) -> tuple[str, dict]:
    env = child_env(str(ROOT))  # this run's pywheel first, then the benchmarks
    out = tmp_path / "out"
    argv = ["benchmarks", *args, "--out", str(out)]
    p = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.argv = {argv!r}; " + code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout + p.stderr, json.loads((out / "results.json").read_text())


def test_smoke_every_workload_without_optional_extras(tmp_path):
    text, doc = run(HIDE + RUN, ["--smoke"], tmp_path)
    kinds = {r["workload"] for r in doc["results"]}
    assert kinds >= {
        "setup",
        "schedule",
        "pair",
        "cancel",
        "teardown",
        "fire_all",
        "fire_spread",
        "gc",
        "memory",
        "late_idle",
        "late_busy",
        "idle",
        "wakeups",
        "stress",
        "program",
        "program_ratio",
    }
    assert not [n for n in doc["notes"] if "failed" in n], doc["notes"]
    assert not [r for r in doc["results"] if "error" in r]
    assert "uvloop not importable" in text
    assert "rloop not importable" in text
    assert "matplotlib not installed" in text
    assert "## call_later with N pending" in text and "| pywheel |" in text
    impls = {r["impl"] for r in doc["results"] if r["workload"] == "schedule"}
    assert impls >= {
        "floor: C call",
        "floor: Py call from C",
        "pywheel",
        "asyncio",
        "sched",
        "heapq tuples",
        "threading.Timer",
    }
    idle = {r["impl"] for r in doc["results"] if r["workload"] == "idle"}
    assert idle >= {
        "floor: C call",
        "pywheel reschedule",
        "WheelEventLoop reschedule",
        "pywheel cancel+new",
        "asyncio cancel+new",
        "asyncio Timeout",
    }
    assert "## Idle timeouts" in text
    assert all(t["measured"] for t in doc["targets"])
    # the programs on the loops left without the extras, every program once
    progs = {(r["program"], r["impl"]) for r in doc["results"] if r["workload"] == "program"}
    assert progs == {
        (p, loop)
        for p in ("storm", "timeout", "wait_for", "keepalive", "heartbeat")
        for loop in ("asyncio", "WheelEventLoop")
    }
    ratios = {r["impl"] for r in doc["results"] if r["workload"] == "program_ratio"}
    assert ratios == {"WheelEventLoop / asyncio"}
    assert "## Programs: whole programs" in text
    rows = {t["target"]: t for t in doc["targets"]}
    row = rows["pywheel.uvloop ≥ 1.5× uvloop's throughput on every timeout-heavy program"]
    assert row["ok"] is None and row["measured"].startswith("not measured")
    row = rows["WheelEventLoop ahead of stock asyncio on every program"]
    assert row["ok"] in (True, False) and "keepalive" in row["measured"]


@pytest.mark.skipif(
    not (importlib.util.find_spec("uvloop") and importlib.util.find_spec("matplotlib")),
    reason="uvloop and matplotlib (the bench extra) not installed",
)
def test_smoke_uvloop_rows_and_plot(tmp_path):
    args = ["--smoke", "--only", "ops,idle,stress", "--impl", "pywheel,uvloop"]
    text, doc = run(RUN, args, tmp_path)
    assert {r["impl"] for r in doc["results"] if r["workload"] == "pair"} >= {"uvloop", "pywheel"}
    assert "uvloop cancel+new" in {r["impl"] for r in doc["results"] if r["workload"] == "idle"}
    assert (tmp_path / "out" / "plot.png").stat().st_size > 10_000


@pytest.mark.skipif(
    not (importlib.util.find_spec("uvloop") and importlib.util.find_spec("rloop")),
    reason="uvloop and rloop (the bench extra) not installed",
)
def test_smoke_programs_and_loops_with_rloop(tmp_path):
    text, doc = run(RUN, ["--smoke", "--only", "loops,programs"], tmp_path)
    assert not [n for n in doc["notes"] if "failed" in n], doc["notes"]
    loops = {"asyncio", "uvloop", "rloop", "WheelEventLoop", "pywheel.uvloop"}
    try:
        import pywheel.rloop  # noqa: F401
    except ImportError:
        assert "pywheel.rloop skipped" in text
    else:
        loops.add("pywheel.rloop")
    for prog in ("storm", "timeout", "wait_for", "keepalive", "heartbeat"):
        ran = {
            r["impl"] for r in doc["results"] if r["workload"] == "program" and r["program"] == prog
        }
        assert ran == loops, prog
    pairs = {r["impl"] for r in doc["results"] if r["workload"] == "loops_pair"}
    assert {"rloop", "uvloop"} <= pairs
    storm = {r["impl"] for r in doc["results"] if r["workload"] == "loops_storm"}
    assert loops <= storm
    ratios = {r["impl"] for r in doc["results"] if r["workload"] == "program_ratio"}
    assert {"pywheel.uvloop / uvloop", "pywheel.uvloop / rloop"} <= ratios
    rows = {t["target"]: t for t in doc["targets"]}
    assert rows["pywheel.uvloop ahead of rloop on every timeout-heavy program"]["ok"] is not None
    assert "| rloop |" in text or "| rloop " in text
