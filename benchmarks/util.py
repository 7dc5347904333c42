"""Small helpers: clocks, counters read from /proc, GC counting, progress."""

from __future__ import annotations

import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
ROOT = Path(__file__).resolve().parent.parent
perf_ns = time.perf_counter_ns
mono_ns = time.monotonic_ns


def child_env() -> tuple[dict, str]:
    """(environment, cwd) for a child interpreter that runs this benchmark
    package against the pywheel this process imported: that pywheel's
    parent directory first on the path, then the caller's PYTHONPATH, then
    the checkout holding `benchmarks`; PYTHONSAFEPATH keeps the working
    directory off the path.  Without it a child of a run against an
    installed pywheel (a wheel in site-packages) found the checkout's
    pywheel/ first, which has no built extension there."""
    import pywheel

    root = str(Path(__file__).resolve().parent.parent)
    pkg_parent = str(Path(pywheel.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_parent, env.get("PYTHONPATH"), root]))
    env["PYTHONSAFEPATH"] = "1"
    return env, root


def json_child(args: list[str], label: str, timeout: float):
    """Runs `python ARGS` in a child interpreter set up by child_env and
    returns the JSON value on the last line it prints; a child that fails
    raises RuntimeError naming `label`, with the end of its stderr."""
    env, root = child_env()
    p = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=root, timeout=timeout
    )
    if p.returncode:
        raise RuntimeError(f"{label}: child failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def nop(*_args):
    """The callback every implementation schedules: a no-op Python function."""


def minflt() -> int:
    """Minor page faults of this process so far (first touches of memory)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def rss() -> int:
    """Resident set size in bytes, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def mem_available() -> int:
    """Bytes of memory available for starting new work, from /proc/meminfo."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PHYS_PAGES") * PAGE  # pragma: no cover


def ctx_switches(tid: int) -> int:
    """Voluntary + involuntary context switches of one thread of this process."""
    n = 0
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                n += int(line.split()[1])
    return n


def tids() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


class GcCounter:
    """Counts collections per generation (and their time) while installed."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.ns = [0, 0, 0]
        self._t = 0

    def _cb(self, phase: str, info: dict) -> None:
        g = info["generation"]
        if phase == "start":
            self.counts[g] += 1
            self._t = perf_ns()
        else:
            self.ns[g] += perf_ns() - self._t

    def __enter__(self) -> GcCounter:
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._cb)

    def as_dict(self) -> dict:
        return {
            "gen0": self.counts[0],
            "gen1": self.counts[1],
            "gen2": self.counts[2],
            "gc_ms": round(sum(self.ns) / 1e6, 3),
        }


def median(xs):
    return statistics.median(xs) if xs else None


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile of xs (q in 0..100)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "csrc", "pywheel"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    mem = os.sysconf("SC_PHYS_PAGES") * PAGE
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "commit": commit + ("+dirty" if dirty else ""),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "loadavg_start": os.getloadavg(),
    }


class Progress:
    """tqdm when installed, else one line per step on stderr."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.i, self.enabled = total, 0, enabled
        self.t0 = time.monotonic()
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=total, file=sys.stderr, unit="step", dynamic_ncols=True)

    def step(self, label: str) -> None:
        """Announces the step about to run."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_description_str(label)
            if self.i:
                self.bar.update(1)
        else:
            tty = sys.stderr.isatty()
            msg = f"[{self.i + 1}/{self.total} {time.monotonic() - self.t0:6.1f}s] {label}"
            sys.stderr.write(("\r" + msg.ljust(78)) if tty else msg + "\n")
            sys.stderr.flush()
        self.i += 1

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(1)
            self.bar.close()
        elif sys.stderr.isatty():
            sys.stderr.write("\n")
