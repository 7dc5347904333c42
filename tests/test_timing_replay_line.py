"""The replay line a --timing-fuzz failure prints reproduces that failure
when pasted: run through a shell, from the directory pytest was started in,
it gives the same FAILED line.  It keeps the options given on the command
line (-o asyncio_mode=auto, -p, -c, --rootdir), names the test by a path
that works from that directory, and starts pytest as it was started (here
``python -m pytest`` with this interpreter)."""

import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from helpers import run_pytest, run_shell

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "examples" / "timing_bugs").is_dir():
    pytest.skip("examples/ is not next to these tests", allow_module_level=True)

TESTS = """
from examples.timing_bugs import lease

async def test_bug():  # no marker: asyncio_mode=auto, given with -o, runs it
    await lease.scenario()

async def test_fine():
    pass
"""

FUZZ = ["--timing-fuzz=20", "--timing-max-late=0.005"]


def _replay(r) -> str:
    m = re.search(r"^replay: (.*)$", r.stdout, re.M)
    assert m is not None, r.stdout + r.stderr
    return m.group(1)


def _failed(r) -> str:
    m = re.search(r"^FAILED .*$", r.stdout, re.M)
    assert m is not None, r.stdout + r.stderr
    return m.group(0)


def test_replay_line_keeps_command_line_options(tmp_path):
    pytest.importorskip("pytest_asyncio")
    files = {"test_auto.py": TESTS}
    opts = ["-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function"]
    r = run_pytest(tmp_path, files, *opts, *FUZZ, pythonpath=ROOT, timeout=300)
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    failed = _failed(r)
    assert "LeaseLost" in failed
    line = _replay(r)
    r2 = run_shell(tmp_path, line, pythonpath=ROOT)
    assert "not natively supported" not in r2.stdout + r2.stderr, line
    assert "1 failed" in r2.stdout and failed in r2.stdout, (line, failed, r2.stdout + r2.stderr)
    words = shlex.split(line)
    # The interpreter as started: its bare name when PATH finds that same file
    # (an activated venv), else its path.
    assert words[1:3] == ["-m", "pytest"], line
    assert os.path.samefile(shutil.which(words[0]) or words[0], sys.executable), line
    assert "asyncio_mode=auto" in words and "--timing-fuzz=20" not in words, line
    assert "test_auto.py::test_bug" in words and "--virtual-time" in words, line


def test_replay_line_from_another_directory_with_config_and_rootdir(tmp_path):
    """Started in tests/ with the ini file elsewhere (-c) and the rootdir
    above (--rootdir): node ids are relative to the rootdir, the replay's
    test path to the directory it is pasted in."""
    pytest.importorskip("pytest_asyncio")
    (tmp_path / "setup").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "setup" / "ci.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    (tmp_path / "tests" / "test_x.py").write_text(TESTS)
    here = tmp_path / "tests"
    args = ["-c", "../setup/ci.ini", "--rootdir=..", "-p", "no:warnings", "."]
    r = run_pytest(here, {}, *args, *FUZZ, pythonpath=ROOT, timeout=300)
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    failed = _failed(r)
    assert failed.startswith("FAILED test_x.py::test_bug - "), failed  # as seen from here
    line = _replay(r)
    r2 = run_shell(here, line, pythonpath=ROOT)
    assert "1 failed" in r2.stdout and failed in r2.stdout, (line, failed, r2.stdout + r2.stderr)
    words = shlex.split(line)
    assert "." not in words, line  # the session's own paths are not replayed
    assert "test_x.py::test_bug" in words, line
    assert words[words.index("-c") + 1] == "../setup/ci.ini", line
