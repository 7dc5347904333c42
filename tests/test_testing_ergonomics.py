"""pywheel.testing says what is wrong (issue 20, point 5): timings() with
bounds that are all 0 refuses; a failure's report carries the virtual time;
testing.run() inside a running loop raises one clear error and leaves no
un-awaited coroutine; the pytest-asyncio recipe loads without pytest-asyncio."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import traceback
import warnings

import pytest
from helpers import run_pytest

from pywheel import testing as vt


# timings() with no argument at all uses its documented defaults (issue 21,
# point 5: tests/test_timing_defaults.py); bounds given as all 0 still refuse.
@pytest.mark.parametrize(
    "kwargs", [{"max_late": 0.0}, {"max_late": 0, "max_cost": 0.0, "max_jitter": 0}]
)
def test_timings_with_no_bound_refuses(kwargs):
    pytest.importorskip("hypothesis")
    with pytest.raises(ValueError, match="at least one non-zero bound"):
        vt.timings(**kwargs)
    vt.timings(max_cost=0.001)  # one is enough


async def _fails_at(t: float):
    await asyncio.sleep(t)
    raise AssertionError("late")


def test_a_failure_carries_the_virtual_time():
    with pytest.raises(AssertionError) as info:
        vt.run(_fails_at(12.5), start=2.0, quantum=0)  # exact readings: t=14.5
    notes = info.value.__notes__
    assert notes == ["pywheel.testing: the run ended at virtual time t=14.5 (it started at t=2.0)"]
    assert "t=14.5" in "".join(traceback.format_exception(info.value))


def test_the_note_is_added_once_and_not_to_the_loops_own_errors():
    loop = vt.VirtualEventLoop()
    try:
        with pytest.raises(AssertionError) as info:
            loop.run_until_complete(_fails_at(1.0))
        exc = info.value

        async def reraise():
            raise exc

        with pytest.raises(AssertionError):
            loop.run_until_complete(reraise())
        assert len(exc.__notes__) == 1
    finally:
        loop.close()
    with pytest.raises(vt.TimeLimitError) as limit:
        vt.run(asyncio.sleep(10), limit=1)
    assert not getattr(limit.value, "__notes__", None)  # its message says when


def test_run_inside_a_running_loop_raises_one_clear_error():
    async def inner():
        await asyncio.sleep(1)

    async def outer():
        vt.run(inner())

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... never awaited" would fail
        with pytest.raises(RuntimeError, match=r"testing\.run\(\) cannot be called") as info:
            asyncio.run(outer())
        import gc

        gc.collect()
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert "await the coroutine" in str(info.value)


def test_run_inside_a_running_loop_leaves_no_warning_in_a_child():
    code = textwrap.dedent(
        """
        import asyncio, gc
        from pywheel import testing as vt

        async def inner():
            await asyncio.sleep(1)

        async def outer():
            try:
                vt.run(inner())
            except RuntimeError as exc:
                print("E", str(exc).split(":")[0])

        asyncio.run(outer())
        gc.collect()
        """
    )
    r = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("E pywheel.testing.run() cannot be called"), r.stdout
    assert r.stderr == "", r.stderr  # on main: "coroutine 'inner' was never awaited"


_pytest = run_pytest


def test_the_pytest_report_shows_the_virtual_time(tmp_path):
    r = _pytest(
        tmp_path,
        {
            "test_fail.py": """
            import asyncio, pytest

            @pytest.mark.virtual_time
            async def test_marker():
                await asyncio.sleep(3600)
                assert False, "expired"

            def test_fixture(virtual_loop):
                async def main():
                    await asyncio.sleep(7)
                    raise KeyError("gone")
                virtual_loop.run_until_complete(main())
            """
        },
        "-p", "no:asyncio", "-p", "no:anyio",
    )  # fmt: skip
    assert "2 failed" in r.stdout, r.stdout + r.stderr
    assert "the run ended at virtual time t=3600.0" in r.stdout, r.stdout
    assert "the run ended at virtual time t=7.0" in r.stdout, r.stdout


def _docs_recipe() -> str:
    """The pytest-asyncio conftest recipe of docs/howto/pytest-asyncio.md, as
    printed there: the block written to hook/conftest.py (imports included:
    the README's snippet had none and failed with NameError, issue 29)."""
    path = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "howto", "pytest-asyncio.md")
    if not os.path.isfile(path):  # tests copied out of the tree
        pytest.skip("docs/ is not next to these tests")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    marker = next(
        i for i, line in enumerate(lines) if line.startswith("<!-- file: hook/conftest.py")
    )
    assert lines[marker + 1].startswith("```python"), lines[marker + 1]
    end = next(i for i in range(marker + 2, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[marker + 2 : end]) + "\n"


def test_pytest_asyncio_recipe_loads_in_a_run_without_pytest_asyncio(tmp_path):
    # The docs' recipe, as printed, as a conftest, in a run with pytest-asyncio
    # off: without optionalhook=True pytest refuses the unknown hook.
    r = _pytest(
        tmp_path,
        {"conftest.py": _docs_recipe(), "test_x.py": "def test_x():\n    pass\n"},
        "-p", "no:asyncio",
    )  # fmt: skip
    assert "1 passed" in r.stdout, r.stdout + r.stderr
