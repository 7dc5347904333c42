"""The README's table of platforms says what CI runs, and CI runs what it says.

Each row of "Supported versions, platforms and wheels" names, in code spans,
the commands that build or run pywheel on that platform (`make windows-check`,
`.ci/forky check`, `.ci/python-ft` ...).  Every one of them must be a step of
`.ci/run` (or of the lane it starts), every make target must exist, and every
platform check CI runs must be in the table: a row cannot claim a check that
CI dropped, and a check cannot be added without its row.
"""

import os
import re

import pytest
from helpers import ROOT

README = os.path.join(ROOT, "README.md")
CI_RUN = os.path.join(ROOT, ".ci", "run")
MAKEFILE = os.path.join(ROOT, "Makefile")
HEADING = "## Supported versions, platforms and wheels"

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(CI_RUN) and os.path.isfile(MAKEFILE) and os.path.isfile(README)),
    reason="needs a checkout's README.md, Makefile and .ci/ (not shipped in the sdist)",
)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def table() -> list[list[str]]:
    """The rows of the README's platform table, as lists of cells."""
    text = _read(README)
    assert HEADING in text, f"README.md has no {HEADING!r} section"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("|")
    ]
    assert len(rows) > 2, "the section has no table"
    header, rule, *body = rows
    assert all(set(cell) <= set("-: ") for cell in rule), rule
    assert all(len(row) == len(header) for row in body), "a row with the wrong number of cells"
    return body


def commands_in(cells: list[str]) -> set[str]:
    """The code spans of the cells that are commands of this checkout."""
    spans = re.findall(r"`([^`]+)`", " ".join(cells))
    return {s for s in spans if s.startswith(("make ", ".ci/"))}


def ci_commands() -> set[str]:
    """What .ci/run's steps run, as the table spells it: make targets (without
    -s), .ci/ scripts with their first argument where they take one."""
    text = _read(CI_RUN)
    found = {f"make {t}" for t in re.findall(r"\bmake -s ([a-z0-9-]+)", text)}
    found |= {".ci/forky check"} if re.search(r"\.ci/forky check\b", text) else set()
    found |= {".ci/python-ft"} if re.search(r"^\s*\.ci/python-ft\b", text, re.M) else set()
    found |= {".ci/test-dist"} if ".ci/test-dist wheel" in text else set()
    return found


def test_every_command_of_the_table_is_run_by_ci():
    claimed = set().union(*(commands_in(row) for row in table()))
    assert claimed, "the table names no command"
    missing = claimed - ci_commands()
    assert not missing, f"the README's table names commands .ci/run does not run: {missing}"


def test_every_platform_check_of_ci_has_its_row():
    claimed = set().union(*(commands_in(row) for row in table()))
    platform_checks = {c for c in ci_commands() if c.endswith("-check") or c.startswith(".ci/")}
    assert platform_checks - claimed == set(), "a platform check CI runs is not in the table"


def test_the_tables_make_targets_exist():
    makefile = _read(MAKEFILE)
    for cmd in set().union(*(commands_in(row) for row in table())):
        if cmd.startswith("make "):
            target = cmd.split()[1]
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no target {target}"


def test_every_row_says_what_is_not_run():
    # The last column is what has not been run on that platform; "nothing
    # else" is an answer, an empty cell is not.
    for row in table():
        assert row[-1], f"{row[0]}: the 'not run' cell is empty"


def test_ci_steps_are_what_the_table_reads():
    # The parser above must see the steps as they are written: a step is
    # `step "NAME" COMMAND...`, possibly continued on the next line.
    text = _read(CI_RUN)
    assert re.search(r'^step "[^"]+" ', text, re.M)
    assert {"make macos-check", "make windows-check", ".ci/forky check"} <= ci_commands()
