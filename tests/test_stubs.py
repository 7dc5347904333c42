"""pywheel/_core.pyi agrees with the extension at run time.

mypy's stubtest imports pywheel._core and compares every name, signature
(positional-only, keywords, defaults), property and constructor with the stub;
a small program then type-checks against the stubs the way a user's would.
mypy is in the test extra; without it these tests skip, saying so.
"""

import inspect
import site
import subprocess
import sys
import sysconfig
import textwrap

import pytest
from helpers import PYWHEEL_PARENT, child_env

import pywheel

pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]' brings it)")


def mypy_env(tmp_path) -> dict[str, str]:
    """Children see this run's pywheel, and so does mypy: through MYPYPATH for
    a source tree, through site-packages (PEP 561) for an installed wheel
    (mypy refuses site-packages in MYPYPATH)."""
    env = child_env()
    env["MYPY_CACHE_DIR"] = str(tmp_path / "mypy_cache")
    paths = sysconfig.get_paths()
    installed = {paths["purelib"], paths["platlib"], *site.getsitepackages()}
    if PYWHEEL_PARENT not in installed:
        env["MYPYPATH"] = PYWHEEL_PARENT
    return env


def run_mypy(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=mypy_env(tmp_path),
        cwd=tmp_path,  # no pywheel/ here for mypy to find instead
    )


def test_stubtest_finds_no_difference(tmp_path):
    proc = run_mypy(tmp_path, "mypy.stubtest", "--concise", "pywheel._core")
    assert proc.returncode == 0, proc.stdout + proc.stderr


PUBLIC = {
    pywheel.Wheel: [
        "call_later",
        "call_at",
        "call_every",
        "time",
        "time_ns",
        "close",
        "set_exception_handler",
        "get_exception_handler",
        "call_exception_handler",
        "default_exception_handler",
        "stats",
    ],
    pywheel.ManualWheel: [
        "advance",
        "advance_to",
        "next_deadline",
        "next_when",
        "advance_to_next",
        "run_due",
        "collect_due",
        "run_collected",
    ],
    pywheel.TimerHandle: [
        "cancel",
        "cancelled",
        "reschedule",
        "reschedule_later",
        "when",
        "get_context",
    ],
}


def test_methods_expose_their_signature():
    # stubtest can only compare what inspect.signature() can read: a method
    # whose docstring does not start with a valid "name($self, ...)\n--\n\n"
    # line (no "-> result" there) has no signature at run time, and its stub
    # would go unchecked.
    for cls, names in PUBLIC.items():
        for name in names:
            method = getattr(cls, name)
            assert method.__text_signature__, f"{cls.__name__}.{name}: {method.__doc__!r}"
            assert next(iter(inspect.signature(method).parameters)) == "self", name


PASSES = """
    import contextvars
    from typing import assert_type

    import pywheel

    def on_error(wheel: pywheel.Wheel, context: dict[str, object]) -> None: ...

    m = pywheel.ManualWheel(0.001, start=1.0)
    assert_type(m.advance(seconds=1.0), int)
    assert_type(m.advance_to(when=2.0), int)
    assert_type(m.run_due(when=3.0), int)
    assert_type(m.collect_due(when=3.0), int)
    assert_type(m.run_collected(), int)
    assert_type(m.next_when(), float | None)
    assert_type(m.next_deadline(), float | None)
    h = m.call_later(1.0, print, "a", 1, context=contextvars.copy_context())
    assert_type(h, pywheel.TimerHandle)
    assert_type(h._when, float)
    assert_type(h.interval, float | None)
    r = m.call_every(0.5, print, first=0.1)
    assert_type(r.reschedule(when=5.0), bool)
    assert_type(r.reschedule_later(delay=1.0), bool)
    assert_type(r.cancel(), bool)
    m.set_exception_handler(handler=on_error)
    m.call_exception_handler(context={"message": "x"})
    assert_type(m.close(timeout=1.0), list[pywheel.TimerHandle])
    with pywheel.Wheel(tick=0.002) as w:
        assert_type(w, pywheel.Wheel)
        assert_type(w.stats()["late_p99"], float)
    with pywheel.ManualWheel() as mw:
        assert_type(mw, pywheel.ManualWheel)
"""

FAILS = """
    import pywheel

    def takes_int(x: int) -> None: ...

    w = pywheel.ManualWheel()
    w.call_later(1.0, takes_int, "not an int")  # error
    w.call_later(delay=1.0, callback=takes_int)  # error: positional-only
    w.advance("soon")  # error
    w.stats()["no such counter"]  # error
"""


def test_a_program_type_checks_against_the_stubs(tmp_path):
    (tmp_path / "ok.py").write_text(textwrap.dedent(PASSES))
    proc = run_mypy(tmp_path, "mypy", "--strict", "ok.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_stubs_reject_misuse(tmp_path):
    program = textwrap.dedent(FAILS)
    (tmp_path / "bad.py").write_text(program)
    proc = run_mypy(tmp_path, "mypy", "bad.py")
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    found = sorted({int(line.split(":")[1]) for line in errors})
    marked = [i for i, line in enumerate(program.splitlines(), 1) if "# error" in line]
    assert found == marked, proc.stdout + proc.stderr
