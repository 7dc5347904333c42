"""The README's worked example for pywheel.testing, run as written: the code
block under "Testing code that depends on time" and the output shown after it."""

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

README = Path(__file__).resolve().parent.parent / "README.md"
if not README.is_file():  # tests copied out of the tree
    pytest.skip("README.md is not next to these tests", allow_module_level=True)


def _blocks():
    text = README.read_text()
    section = text.split("## Testing code that depends on time", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def test_readme_worked_example_runs_and_prints_what_the_readme_says():
    blocks = _blocks()
    code = next(body for lang, body in blocks if lang == "python")
    shown = next(body for lang, body in blocks if lang == "")
    ns = {"__name__": "test_lease"}
    exec(compile(code, "test_lease.py", "exec"), ns)

    ns["test_lease_punctual"]()

    late = ns["test_lease_late_wakeups"]
    late = settings(derandomize=True, database=None, suppress_health_check=list(HealthCheck))(late)
    with pytest.raises(AssertionError) as info:
        late()
    message = str(info.value)
    first = shown.splitlines()[0]
    assert first.removeprefix("AssertionError: ") in message
    expected = next(line for line in shown.splitlines() if line.startswith("timing: "))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert expected in notes, notes

    # The fix the comment names.
    ns["TTL"] = 10.0

    async def fixed():
        await ns["hold_lease"](ns["TTL"] / 2)

    from hypothesis import given

    from pywheel import testing

    @settings(max_examples=50, derandomize=True, database=None)
    @given(testing.timings(max_late=0.005))
    def fixed_passes(timing):
        testing.run(fixed(), timing=timing)

    fixed_passes()
