"""pytest --timing-fuzz perturbs the loop a test actually runs on, whatever
its scope: function, module or session, under pytest-asyncio and under
anyio's plugin (where an async fixture of a wider scope keeps its runner, and
so its loop, for that scope).  The lease example of the timing-fuzz tutorial
(docs/tutorials/timing-fuzz.md) and the six examples/timing_bugs/ bugs are
caught on each; a fuzz run in which no VirtualEventLoop ran is an error, not
a pass.  Each run is a fresh pytest in a subprocess."""

import re
from pathlib import Path

import pytest
from helpers import run_pytest, run_shell

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorials" / "timing-fuzz.md"
if not (ROOT / "examples" / "timing_bugs").is_dir() or not TUTORIAL.is_file():
    pytest.skip("examples/ and docs/ are not next to these tests", allow_module_level=True)

SCOPES = ["function", "module", "session"]
RUNNERS = ["pytest-asyncio", "anyio"]

# Each bug under the bound its module names (PERTURB), grouped so that one
# pytest run fuzzes a group with one set of --timing-max-* options.
GROUPS = {
    "late": ["tutorial_lease", "lease", "billing_drift"],
    "jitter": ["reply_mismatch", "overlapping_job"],
    "cost": ["watchdog"],
    "cost_lru": ["lru_ttl"],
}
BOUNDS = {
    "late": ["--timing-max-late=0.005"],
    "jitter": ["--timing-max-jitter=0.03"],
    "cost": ["--timing-max-cost=0.002"],
    "cost_lru": ["--timing-max-cost=0.005"],
}


def _tutorial_lease() -> str:
    """The timing-fuzz tutorial's lease example (the page's first python
    block, its test_lease.py), as a module."""
    return re.search(r"```python\n(.*?)```", TUTORIAL.read_text(), re.S).group(1)


def _call(name: str) -> str:
    if name == "tutorial_lease":
        return "tutorial_lease.hold_lease(tutorial_lease.TTL - 0.002)"
    return f"{name}.scenario()"


def _imports(names) -> str:
    lines = []
    for name in names:
        if name == "tutorial_lease":
            lines.append("import tutorial_lease")
        else:
            lines.append(f"from examples.timing_bugs import {name}")
    return "\n".join(lines)


def _files(runner: str, scope: str, names) -> dict:
    """A test module with, for each bug, its test and a test after it on the
    same loop (so the bug's test is not the last to use a shared loop: the
    case whose loop was made once, in the punctual run, and reused), and a
    last test checking that module and session scopes shared one loop."""
    if runner == "pytest-asyncio":
        mark = f'@pytest.mark.asyncio(loop_scope="{scope}")'
        arg = ""
        conftest = ""
        ini = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    else:
        mark = "@pytest.mark.anyio"
        ini = "[pytest]\n"
        if scope == "function":
            arg = ""
            conftest = (
                "import pytest\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"
            )
        else:
            # anyio keeps its runner (and its loop) while an async fixture
            # that uses it lives: one of this scope shares the loop.
            arg = "shared_loop"
            conftest = (
                "import asyncio\nimport pytest\n\n"
                f"@pytest.fixture(scope='{scope}')\n"
                "def anyio_backend():\n"
                "    return 'asyncio'\n\n"
                f"@pytest.fixture(scope='{scope}')\n"
                "async def shared_loop():\n"
                "    yield asyncio.get_running_loop()\n"
            )
    tests = [
        "import asyncio",
        "import pytest",
        _imports(names),
        "",
        "LOOPS = []",
        "",
    ]
    for name in names:
        tests += [
            mark,
            f"async def test_{name}({arg}):",
            "    LOOPS.append(id(asyncio.get_running_loop()))",
            f"    await {_call(name)}",
            "",
            mark,
            f"async def test_{name}_then({arg}):",
            "    LOOPS.append(id(asyncio.get_running_loop()))",
            "    await asyncio.sleep(1)",
            "",
        ]
    if scope != "function":
        tests += [
            "def test_one_loop():",
            "    assert len(set(LOOPS)) == 1, LOOPS",
            "",
        ]
    files = {"pytest.ini": ini, "test_bugs.py": "\n".join(tests)}
    if conftest:
        files["conftest.py"] = conftest
    if "tutorial_lease" in names:
        files["tutorial_lease.py"] = _tutorial_lease()
    return files


def _needs(runner: str) -> None:
    pytest.importorskip("pytest_asyncio" if runner == "pytest-asyncio" else "anyio")


def _fuzz(tmp_path, runner, scope, group, runs=100):
    names = GROUPS[group]
    if "lru_ttl" in names:
        pytest.importorskip("async_lru")
    files = _files(runner, scope, names)
    args = [f"--timing-fuzz={runs}", *BOUNDS[group]]
    return names, run_pytest(tmp_path, files, *args, pythonpath=ROOT, timeout=600)


def _check_caught(r, names, scope):
    out = r.stdout + r.stderr
    for name in names:
        assert f"FAILED test_bugs.py::test_{name} " in r.stdout, out
        assert f"test_bugs.py::test_{name}_then" not in r.stdout.split("short test summary")[-1]
    passed = len(names) + (scope != "function")
    assert re.search(rf"\b{len(names)} failed, {passed} passed\b", r.stdout), out
    if scope != "function":
        # The shared loop was lent each run's Timing.
        assert "a loop made before the test, lent this Timing while it ran" in r.stdout, out


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("runner", RUNNERS)
def test_fuzz_perturbs_the_loop_of_every_scope(tmp_path, runner, scope):
    """The tutorial's lease example and the late-wake-up bugs: caught with a
    function-, module- or session-scoped loop, and the replay line (run as
    printed) fails the same way."""
    _needs(runner)
    names, r = _fuzz(tmp_path, runner, scope, "late")
    _check_caught(r, names, scope)
    line = re.search(r"^replay: (.* test_bugs\.py::test_lease .*)$", r.stdout, re.M)
    assert line is not None, r.stdout
    r2 = run_shell(tmp_path, line.group(1), pythonpath=ROOT)
    assert "1 failed" in r2.stdout, r2.stdout + r2.stderr
    assert "FAILED test_bugs.py::test_lease - examples.timing_bugs.lease.LeaseLost" in r2.stdout


# slow: 18 pytest runs of up to 100 fuzzed runs per test
@pytest.mark.slow
@pytest.mark.parametrize("group", ["jitter", "cost", "cost_lru"])
@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("runner", RUNNERS)
def test_fuzz_finds_every_example_bug_on_every_scope(tmp_path, runner, scope, group):
    _needs(runner)
    names, r = _fuzz(tmp_path, runner, scope, group)
    _check_caught(r, names, scope)


NO_VIRTUAL_LOOP = """
import asyncio
import pytest

@pytest.fixture
def anyio_backend():
    # The suite's own loop factory: a stock loop, which no Timing can reach.
    return ("asyncio", {"loop_factory": asyncio.SelectorEventLoop})

@pytest.mark.anyio
async def test_on_a_stock_loop():
    assert type(asyncio.get_running_loop()) is asyncio.SelectorEventLoop
    await asyncio.sleep(0.01)
"""


def test_fuzz_run_without_a_virtual_loop_is_an_error(tmp_path):
    pytest.importorskip("anyio")
    r = run_pytest(tmp_path, {"test_stock.py": NO_VIRTUAL_LOOP}, "--timing-fuzz=5", timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed" in r.stdout, r.stdout
    assert "--timing-fuzz run 1 perturbed nothing: no pywheel.testing VirtualEventLoop ran" in (
        r.stdout
    ), r.stdout
    # The punctual run alone (no fuzz) passes: only a fuzz run is refused.
    r = run_pytest(tmp_path, {"test_stock.py": NO_VIRTUAL_LOOP}, timeout=300)
    assert "1 passed" in r.stdout, r.stdout + r.stderr


def test_lent_timing_goes_back_after_the_test(tmp_path):
    """A module-scoped loop is perturbed only while a fuzzed test runs: the
    next test's punctual run sees no Timing on it, and the collector is on
    again between tests."""
    pytest.importorskip("pytest_asyncio")
    files = {
        "pytest.ini": "[pytest]\nasyncio_default_fixture_loop_scope = function\n",
        "test_m.py": """
        import asyncio, gc
        import pytest

        SEEN = []

        @pytest.mark.asyncio(loop_scope="module")
        async def test_a():
            SEEN.append(("a", asyncio.get_running_loop().timing is not None, gc.isenabled()))

        @pytest.mark.asyncio(loop_scope="module")
        async def test_b():
            SEEN.append(("b", asyncio.get_running_loop().timing is not None, gc.isenabled()))

        def test_seen():
            assert gc.isenabled()
            # Each: punctual (no Timing, collector on), then 2 fuzz runs
            # (a lent Timing, collector held off while it runs).
            assert SEEN == [e for n in "ab" for e in [(n, False, True)] + [(n, True, False)] * 2]
        """,
    }
    r = run_pytest(tmp_path, files, "--timing-fuzz=2", timeout=300)
    assert "3 passed" in r.stdout, r.stdout + r.stderr
