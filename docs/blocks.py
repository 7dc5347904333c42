"""Every code block of README.md and docs/**/*.md, run by the test suite.

Sybil (a maintained tool for exactly this) collects the pages as pytest
files: one test item per code block, the blocks of a page in order, in one
namespace per page.  This module is the parser Sybil is given; the root
conftest.py wires it in.  The rules a page follows (docs/development.md
shows them to contributors):

* a ```python block runs, with ``__name__ == "__main__"`` and the current
  folder a fresh scratch folder for the page (also first on ``sys.path``);
* markers are HTML comments on the lines directly above a block's opening
  fence (invisible on GitHub and in the built site):

  - ``<!-- fragment -->`` (or ``<!-- fragment: why -->``): not run;
  - ``<!-- file: NAME -->``: written to NAME in the scratch folder, not run;
  - ``<!-- output -->``: the stdout the preceding python block printed,
    compared line by line (trailing spaces dropped; a line ``...`` matches
    any number of lines, ``...`` inside a line any text);
  - ``<!-- output: machine-dependent -->``: the same, every number matching
    any number; ``<!-- machine-dependent -->`` does that for a console block;
  - ``<!-- requires: mod ... -->``: skipped, saying so, when one of the
    modules cannot be imported;

* a ```console block runs: each ``$ `` line is a bash command run in the
  scratch folder (``python``, ``python3`` and ``pytest`` being the Python
  that runs the tests), the lines under it its expected stdout and stderr;
  with none shown, only its exit status (0) is checked; CI is unset,
  COLUMNS=80, NO_COLOR=1, and pytest-asyncio's loop-scope option is set;
* MyST directives (```{toctree} ...) are the site's, not code;
* any other block must carry ``fragment`` or ``file``: an unmarked block that
  nothing runs fails, so a page cannot show code the tests never ran.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Region

PYTHON = {"python", "py", "python3", "pycon3"}
COMMAND_TIMEOUT = 300  # seconds: a console command that takes longer fails

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*?)[ \t]*$")
_MARKER = re.compile(r"^[ \t]*<!--\s*(?P<name>[\w-]+)\s*(?::\s*(?P<value>.*?))?\s*-->[ \t]*$")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_KNOWN = {"fragment", "file", "output", "machine-dependent", "requires"}
_STDOUT = "__docs_stdout__"  # namespace key: what the last python block printed
_SCRATCH = "__docs_scratch__"
_SKIPPED = object()  # _STDOUT's value while its block has not run


@dataclass
class Block:
    """One fenced block: where it is, its language, body and markers."""

    start: int  # offset of the opening fence's line
    end: int  # offset just past the closing fence's line
    line: int  # 1-based line of the first body line
    lang: str
    body: str
    markers: dict[str, str] = field(default_factory=dict)


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with the markers above each."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    found = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].rstrip("\n"))
        if not m:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"]
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j].rstrip("\n")):
            j += 1
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t")
            for line in lines[i + 1 : j]
        )
        markers: dict[str, str] = {}
        k = i - 1
        while k >= 0 and (mk := _MARKER.match(lines[k].rstrip("\n"))):
            markers.setdefault(mk["name"], mk["value"] or "")
            k -= 1
        lang = info.split()[0] if info else ""
        found.append(Block(offsets[i], offsets[min(j + 1, len(lines))], i + 2, lang, body, markers))
        i = j + 1
    return found


# -- matching shown output against real output -------------------------------


def _normalise(text: str, loose: bool) -> list[str]:
    out = [line.rstrip() for line in text.rstrip().splitlines()]
    if loose:
        out = [_NUMBER.sub("0", line) for line in out]
    return out


def _line_matches(want: str, got: str) -> bool:
    if "..." not in want:
        return want == got
    pattern = ".*".join(re.escape(part) for part in want.split("..."))
    return re.fullmatch(pattern, got) is not None


def output_matches(shown: str, actual: str, loose: bool = False) -> bool:
    """Whether ``actual`` output is what ``shown`` shows (rules above)."""
    want, got = _normalise(shown, loose), _normalise(actual, loose)
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(want):
                memo[i, j] = j == len(got)
            elif want[i] == "...":
                memo[i, j] = any(match(i + 1, k) for k in range(j, len(got) + 1))
            else:
                memo[i, j] = j < len(got) and _line_matches(want[i], got[j]) and match(i + 1, j + 1)
        return memo[i, j]

    return match(0, 0)


def _mismatch(what: str, shown: str, actual: str) -> str:
    shown, actual = shown.rstrip(), actual.rstrip()
    return f"{what} differs from what the page shows.\n--- shown:\n{shown}\n--- got:\n{actual}\n"


# -- evaluators --------------------------------------------------------------


def _requires(block: Block) -> None:
    import pytest

    names = block.markers.get("requires", "").split()
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not installed here")


def _run_python(block: Block, path: str):
    def evaluate(example) -> str | None:
        example.namespace[_STDOUT] = _SKIPPED  # until it runs
        _requires(block)
        code = compile("\n" * (block.line - 1) + block.body, path, "exec")
        buffer = io.StringIO()
        ns = example.namespace
        try:
            with contextlib.redirect_stdout(buffer):
                exec(code, ns)
        finally:
            ns[_STDOUT] = buffer.getvalue()
        return None

    return evaluate


def _check_output(block: Block):
    loose = block.markers.get("output") == "machine-dependent"

    def evaluate(example) -> str | None:
        _requires(block)
        actual = example.namespace.get(_STDOUT)
        if actual is _SKIPPED:
            import pytest

            pytest.skip("the block whose output this shows was skipped")
        if actual is None:
            return "an output block with no python block run before it on the page"
        if not output_matches(block.body, actual, loose):
            return _mismatch("The printed output", block.body, actual)
        return None

    return evaluate


def _write_file(block: Block):
    name = block.markers["file"].strip()

    def evaluate(example) -> str | None:
        target = Path(example.namespace[_SCRATCH]) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.body)
        return None

    return evaluate


def _commands(body: str) -> list[tuple[str, str]]:
    """(command, shown output) pairs of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"console block: output before any '$ ' command: {line!r}")
    return [(cmd, "\n".join(out)) for cmd, out in pairs]


def _path(scratch: Path, inherited: str) -> str:
    """PATH for console commands: the running Python's own folder first (a
    venv's bin: its `python` and `pytest` are what a reader's would be, and
    what pywheel's reports name), then shims for any of `python`, `python3`
    and `pytest` that folder lacks."""
    home = Path(sys.executable).parent
    shims = scratch / ".docs-bin"
    shims.mkdir(exist_ok=True)
    for name, args in (("python", ""), ("python3", ""), ("pytest", " -m pytest")):
        if not (home / name).is_file():
            shim = shims / name
            shim.write_text(f'#!/bin/sh\nexec "{sys.executable}"{args} "$@"\n')
            shim.chmod(0o755)
    return os.pathsep.join([str(home), str(shims), inherited])


def _run_console(block: Block):
    loose = "machine-dependent" in block.markers
    commands = _commands(block.body)

    def evaluate(example) -> str | None:
        _requires(block)
        scratch = Path(example.namespace[_SCRATCH])
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")
        }
        env.update(COLUMNS="80", NO_COLOR="1", PATH=_path(scratch, env.get("PATH", "")))
        # pytest-asyncio (in the test extra) warns in a folder whose config
        # does not set this; the pages show pytest as a project configured
        # for it would print (docs/howto/pytest-asyncio.md sets it).
        if importlib.util.find_spec("pytest_asyncio") is not None:
            env["PYTEST_ADDOPTS"] = "-o asyncio_default_fixture_loop_scope=function"
        for command, shown in commands:
            try:
                proc = subprocess.run(
                    ["bash", "-c", command],
                    cwd=scratch,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=COMMAND_TIMEOUT,
                )
            except subprocess.TimeoutExpired:
                return f"`{command}` still ran after {COMMAND_TIMEOUT} s"
            if not shown.strip():
                if proc.returncode != 0:
                    return f"`{command}` exited {proc.returncode}:\n{proc.stdout}"
            elif not output_matches(shown, proc.stdout, loose):
                return _mismatch(f"The output of `{command}`", shown, proc.stdout)
        return None

    return evaluate


def _unmarked(block: Block):
    def evaluate(example) -> str | None:
        return (
            f"a ```{block.lang or '(no language)'} block that nothing runs: run it (python or "
            "console), or mark it <!-- fragment --> or <!-- file: NAME --> on the line above "
            "its opening fence"
        )

    return evaluate


def _bad_marker(block: Block, names: list[str]):
    def evaluate(example) -> str | None:
        return f"unknown marker(s) {names} above this block; known: {sorted(_KNOWN)}"

    return evaluate


def evaluator_for(block: Block, path: str = "<page>"):
    """The evaluator of one block, or None for a block nothing runs by design."""
    unknown = sorted(set(block.markers) - _KNOWN)
    if unknown:
        return _bad_marker(block, unknown)
    if "fragment" in block.markers or block.lang.startswith("{"):
        return None
    if "file" in block.markers:
        return _write_file(block)
    if "output" in block.markers:
        return _check_output(block)
    if block.lang in PYTHON:
        return _run_python(block, path)
    if block.lang == "console":
        return _run_console(block)
    return _unmarked(block)


def parse(document):
    """Sybil's parser: a Region per block that runs (or must say why not)."""
    for block in blocks(document.text):
        evaluator = evaluator_for(block, document.path)
        if evaluator is not None:
            yield Region(block.start, block.end, block, evaluator)


# -- a page's scratch folder ---------------------------------------------------


def setup(namespace: dict) -> None:
    scratch = tempfile.mkdtemp(prefix="pywheel-docs-")
    namespace.update({"__name__": "__main__", _SCRATCH: scratch, "__docs_cwd__": os.getcwd()})
    os.chdir(scratch)
    sys.path.insert(0, scratch)


def teardown(namespace: dict) -> None:
    scratch = namespace[_SCRATCH]
    os.chdir(namespace["__docs_cwd__"])
    with contextlib.suppress(ValueError):
        sys.path.remove(scratch)
    # Modules a page imported from its scratch folder (app.py ...) go with it,
    # so that another page's app.py is not this one's.
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(scratch):
            del sys.modules[name]
    shutil.rmtree(scratch, ignore_errors=True)
