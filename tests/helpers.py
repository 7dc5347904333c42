"""Helpers shared by the subprocess-based test files."""

import os
import subprocess
import sys
import textwrap

import pywheel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The folder holding the pywheel package this test run imported: the source
# tree for an editable install, site-packages for an installed wheel.  Child
# interpreters get it first on their path, and PYTHONSAFEPATH so that their
# working folder or script folder (this tree, say, with a pywheel/ that has no
# built extension) cannot put another copy in front: a child always imports
# the pywheel that the parent imported.
PYWHEEL_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(pywheel.__file__)))


def child_env(*extra_path: str) -> dict[str, str]:
    """os.environ for a child interpreter that must import this run's pywheel;
    extra_path entries (e.g. ROOT for the benchmarks) come after it."""
    env = dict(os.environ)
    path = [PYWHEEL_PARENT, *extra_path, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    env["PYTHONSAFEPATH"] = "1"
    return env


def run_script(code: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter that imports the same pywheel as this one."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
    )


def thread_count() -> int:
    """Threads of this process, native wheel threads included."""
    return len(os.listdir("/proc/self/task"))
