"""The `loops` benchmark workload runs and reports every loop side by side
(`python -m benchmarks --smoke --only loops`, in a subprocess; no timing is
judged here)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from helpers import child_env

ROOT = Path(__file__).resolve().parent.parent


def test_loops_workload_reports_each_loop(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--only", "loops", "--no-progress"]
        + ["--out", str(out)],
        cwd=ROOT,
        env=child_env(str(ROOT)),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert not [n for n in doc["notes"] if "failed" in n], doc["notes"]
    recs = doc["results"]
    assert not [r for r in recs if "error" in r], recs
    pairs = {r["impl"] for r in recs if r["workload"] == "loops_pair"}
    storms = {r["impl"] for r in recs if r["workload"] == "loops_storm"}
    mem = {r["impl"] for r in recs if r["workload"] == "loops_memory"}
    want = {"asyncio", "WheelEventLoop", "its wheel, direct"}
    assert pairs >= want and mem >= want
    assert storms >= {"asyncio", "WheelEventLoop"}
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    assert ("uvloop" in pairs) == has_uvloop
    assert all(r["ns"] > 0 for r in recs if r["workload"] == "loops_pair")
    assert all(r["s"] > 0 for r in recs if r["workload"] == "loops_storm")
    # WheelEventLoop against its own wheel in alternating rounds on one loop
    (ratio,) = [r for r in recs if r["workload"] == "loops_ratio"]
    assert len(ratio["loop_ns"]) == len(ratio["wheel_ns"]) == len(ratio["ratios"]) >= 3
    assert min(ratio["ratios"]) <= ratio["ratio"] <= max(ratio["ratios"])
    # pywheel.uvloop against uvloop in alternating rounds, where uvloop imports
    uv = [r for r in recs if r["workload"] == "loops_uv_ratio"]
    assert bool(uv) == has_uvloop
    for r in uv:
        assert len(r["uvloop_ns"]) == len(r["pywheel_uvloop_ns"]) == len(r["ratios"]) >= 3
        assert min(r["ratios"]) <= r["ratio"] <= max(r["ratios"])
    uv_target = [t for t in doc["targets"] if "faster than uvloop's" in t["target"]]
    assert len(uv_target) == has_uvloop
    # rloop's pairs (run in a child process) where it imports
    has_rloop = importlib.util.find_spec("rloop") is not None
    assert ("rloop" in pairs) == has_rloop
    # one column per loop, pywheel.uvloop's and pywheel.rloop's too (filled where they import)
    head = (
        "| | asyncio | uvloop | rloop | WheelEventLoop | pywheel.uvloop | pywheel.rloop "
        "| its wheel, direct |"
    )
    assert "## Loops: the event loops side by side" in p.stdout and head in p.stdout
    assert any("WheelEventLoop call_later+cancel" in t["target"] for t in doc["targets"])
