"""The worked example of pywheel.testing's hypothesis path, run as the
timing-fuzz tutorial prints it (docs/tutorials/timing-fuzz.md, "The same hunt
inside one test: hypothesis"; it was the README's): the test file shown
there, and the failure shown under it.  The docs runner runs the page's
commands as well; this test checks the example under derandomized
hypothesis, without pytest in between, and checks the fix the page names;
and that the race picture the page shows is what its command draws."""

import re
from pathlib import Path

import pytest
from helpers import run_pytest
from hypothesis import HealthCheck, settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tutorials" / "timing-fuzz.md"
if not PAGE.is_file():  # tests copied out of the tree
    pytest.skip("docs/ is not next to these tests", allow_module_level=True)

NAME = "test_lease_hypothesis.py"


def _example():
    """The file block named NAME and the console block that runs it."""
    text = PAGE.read_text()
    code = re.search(rf"<!-- file: {NAME} -->\n```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(rf"```console\n\$ pytest [^\n]*{NAME}\n(.*?)```", text, re.S).group(1)
    # pytest's report lines of the assertion: "E           <text>"
    errors = [line[1:].strip() for line in shown.splitlines() if line.startswith("E ")]
    return code, errors


def test_tutorial_hypothesis_example_runs_and_fails_as_the_page_shows():
    code, errors = _example()
    ns = {"__name__": NAME.removesuffix(".py")}
    exec(compile(code, NAME, "exec"), ns)

    ns["test_lease_punctual"]()

    late = ns["test_lease_late_wakeups"]
    late = settings(derandomize=True, database=None, suppress_health_check=list(HealthCheck))(late)
    with pytest.raises(AssertionError) as info:
        late()
    message = str(info.value)
    first = errors[0]
    assert first.startswith("AssertionError: "), errors
    assert first.removeprefix("AssertionError: ") in message
    expected = next(line for line in errors if line.startswith("timing: Timing("))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert expected in notes, notes

    # The fix the page names: renewing at TTL / 2 passes.
    async def fixed():
        await ns["hold_lease"](ns["TTL"] / 2)

    from hypothesis import given

    from pywheel import testing

    @settings(max_examples=50, derandomize=True, database=None)
    @given(testing.timings(max_late=0.005))
    def fixed_passes(timing):
        testing.run(fixed(), timing=timing)

    fixed_passes()


def test_tutorial_race_picture_is_what_the_command_draws(tmp_path):
    """docs/images/lease_race.svg, shown by the tutorial as the picture its
    --timing-trace command writes, is that command's output, byte for byte
    (the tutorial's test_lease.py, its replay token)."""
    text = PAGE.read_text()
    code = re.search(r"<!-- file: test_lease.py -->\n```python\n(.*?)```", text, re.S).group(1)
    command = re.search(r"^\$ pytest (test_lease\.py::\S+ .*--timing-trace=race)$", text, re.M)
    r = run_pytest(tmp_path, {"test_lease.py": code}, *command.group(1).split())
    assert "1 failed" in r.stdout, r.stdout + r.stderr
    drawn = (tmp_path / "race" / "test_lease.py__test_lease.svg").read_text()
    committed = PAGE.parent.parent / "images" / "lease_race.svg"
    assert drawn == committed.read_text(), "regenerate docs/images/lease_race.svg"
