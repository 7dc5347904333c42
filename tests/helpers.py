"""Helpers shared by the subprocess-based test files."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(code: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter that imports pywheel from this tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def thread_count() -> int:
    """Threads of this process, native wheel threads included."""
    return len(os.listdir("/proc/self/task"))
