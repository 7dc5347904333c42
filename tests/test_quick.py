"""The quick set (tests/quick.py, `python -m pytest -m quick`) cannot rot to
nothing: every area keeps tests, every listed name still names a collected
test, and none of them is one the default run leaves out."""

import subprocess
import sys

from helpers import ROOT, child_env
from quick import QUICK

EXCLUDED = ("slow", "real_bugs", "virtual_suites")  # pyproject.toml's addopts


def collected(*args: str, ok: tuple[int, ...] = (0,)) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        cwd=ROOT,
    )
    assert proc.returncode in ok, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_every_area_has_tests_and_every_name_is_collected():
    ids = collected("-m", "quick")
    for area, entries in QUICK.items():
        assert entries, area
        for file, function in entries:
            mine = [i for i in ids if i.split("::")[0].endswith("/" + file)]
            names = {i.split("::")[-1].split("[")[0] for i in mine}
            assert function in names, f"{area}: {file}::{function} is not collected"
    # Nothing else is marked quick.
    listed = {(file, fn) for entries in QUICK.values() for file, fn in entries}
    for i in ids:
        file = i.split("::")[0].rsplit("/", 1)[-1]
        assert (file, i.split("::")[-1].split("[")[0]) in listed, i


def test_the_quick_set_is_not_left_out_of_the_default_run():
    # 5: pytest collected nothing, as it must here.
    both = collected("-m", f"quick and ({' or '.join(EXCLUDED)})", ok=(0, 5))
    assert both == []
