"""mypy run as a user runs it: from a folder of their own, on a program that
imports pywheel and pywheel.testing, with nothing but the installation to find
the package by (no MYPYPATH, no PYTHONPATH).

The README installs in editable mode (pip install -e .): setuptools then
writes a static .pth file (pyproject.toml's [tool.setuptools] package-dir says
why), which mypy reads; the import hook it writes for a flat layout otherwise
is invisible to mypy.  The revealed types are those of the package's own
annotations: testing.run(), pywheel.asyncio.run() and pywheel.uvloop.run()
return their coroutine's result type, timings() a strategy of Timing.
docs/howto/typing.md shows the same run.
"""

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]' brings it)")

try:
    importlib.metadata.distribution("pywheel")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover
    pytest.skip(
        "pywheel is not installed (imported from a source tree): a user's mypy "
        "could not find it either",
        allow_module_level=True,
    )

# Each reveal_type() line says what mypy must reveal there ("builtins." left
# out: mypy 2 leaves it out, older ones print it); the one error is marked.
PROGRAM = """\
    import asyncio

    import pywheel
    import pywheel.asyncio
    import pywheel.uvloop
    from pywheel import testing


    async def answer() -> int:
        await asyncio.sleep(3600)
        return 42


    def checked() -> int:
        return testing.run(answer())  # strict: returning Any would be an error


    async def pong() -> None:
        reveal_type(await testing.latency(0.5, "pong"))  # str
        reveal_type(await testing.latency(0.5))  # None


    reveal_type(testing.run(answer()))  # int
    reveal_type(pywheel.asyncio.run(answer()))  # int
    reveal_type(pywheel.uvloop.run(answer()))  # int
    reveal_type(testing.run(answer(), trace=testing.Trace()))  # int
    reveal_type(testing.timings())  # ...SearchStrategy[pywheel.testing._timing.Timing]
    reveal_type(testing.timings(max_late=0.01))  # ...SearchStrategy[pywheel.testing._timing.Timing]
    reveal_type(pywheel.Wheel().call_later(1.0, print))  # pywheel._core.TimerHandle
    wrong: str = testing.run(answer())  # error: variable has type "str"
"""


def user_mypy(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    env["MYPY_CACHE_DIR"] = str(tmp_path / "mypy_cache")
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,  # a user's folder: no pywheel/ here
    )


def test_mypy_finds_the_installed_package_and_its_types(tmp_path):
    program = textwrap.dedent(PROGRAM)
    (tmp_path / "app.py").write_text(program)
    proc = user_mypy(tmp_path, "--strict", "app.py")
    out = proc.stdout + proc.stderr
    assert "import-not-found" not in out and "Cannot find implementation" not in out, out
    revealed, errors = {}, {}
    for line in out.splitlines():
        where, _, what = line.partition(": ")
        if what.startswith("note: Revealed type is "):
            revealed[int(where.split(":")[1])] = what.split('"')[1].replace("builtins.", "")
        elif what.startswith("error: "):
            errors[int(where.split(":")[1])] = what
    wanted, marked = {}, {}
    for number, line in enumerate(program.splitlines(), 1):
        if "reveal_type(" in line:
            wanted[number] = line.rsplit("# ", 1)[1]
        elif "# error: " in line:
            marked[number] = line.rsplit("# error: ", 1)[1]
    assert revealed.keys() == wanted.keys(), out
    for number, want in wanted.items():
        if want.startswith("..."):
            assert revealed[number].endswith(want[3:]), out
        else:
            assert revealed[number] == want, out
    assert errors.keys() == marked.keys(), out
    for number, want in marked.items():
        assert want in errors[number], out
    assert proc.returncode == 1, out
