"""What a failing virtual-time test reports: tracebacks that start and end
in the user's code (pywheel's frames hidden from pytest's report, shown by
--full-trace), the loop's errors under their public names, and a
TimeLimitError that names the next timer's owner and has a frame of the
program."""

import asyncio
import pickle
import re
import traceback

import pytest
from helpers import run_pytest

import pywheel.testing as testing
from pywheel import _tracebacks
from pywheel.testing import _loop

SHAPES = """
import asyncio
import pytest
import pywheel.testing as testing

MARK = pytest.mark.virtual_time

@MARK
async def test_deadlock():
    fut = asyncio.get_running_loop().create_future()
    await fut  # DEADLOCK-LINE

@MARK
async def test_limit():
    async def tick():
        while True:
            await asyncio.sleep(1)  # TICK-LINE

    task = asyncio.ensure_future(tick())
    await asyncio.Event().wait()  # LIMIT-LINE

@MARK
async def test_assert_in_task():
    async def worker():
        await asyncio.sleep(1)
        assert 1 + 1 == 3, "worker broke"  # ASSERT-LINE

    await asyncio.create_task(worker())

def test_sync_run_deadlock():
    async def main():
        await asyncio.get_running_loop().create_future()  # SYNC-LINE

    testing.run(main())
"""

TESTS = ("test_deadlock", "test_limit", "test_assert_in_task", "test_sync_run_deadlock")
LINES = {
    "test_deadlock": "DEADLOCK-LINE",
    "test_limit": "LIMIT-LINE",
    "test_assert_in_task": "ASSERT-LINE",
    "test_sync_run_deadlock": "SYNC-LINE",
}
PYWHEEL_FRAME = re.compile(r"pywheel[/\\](testing[/\\])?\w+\.py:\d+")


def sections(out: str) -> dict[str, str]:
    """Each failure's report, by test name (pytest's ____ name ____ headers)."""
    parts = re.split(r"^_{3,} (\w+) _{3,}$", out, flags=re.M)
    found = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    last = found.get(TESTS[-1])
    if last is not None:  # the summary after the last report is not part of it
        found[TESTS[-1]] = last.split("short test summary info")[0]
    return found


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """The four shapes run once plainly and once with --full-trace."""
    out = {}
    for name, args in (("default", ()), ("full", ("--full-trace",))):
        tmp = tmp_path_factory.mktemp(name)
        r = run_pytest(tmp, {"test_shapes.py": SHAPES}, *args)
        assert r.returncode == 1, r.stdout + r.stderr
        out[name] = sections(r.stdout)
        assert set(out[name]) == set(TESTS), r.stdout
    return out


@pytest.mark.parametrize("name", TESTS)
def test_a_failure_report_shows_no_frame_of_pywheel(reports, name):
    report = reports["default"][name]
    assert not PYWHEEL_FRAME.search(report), report
    if name != "test_sync_run_deadlock":  # (asyncio.Runner's frames are its own)
        assert "base_events.py" not in report, report


@pytest.mark.parametrize("name", TESTS)
def test_a_failure_report_ends_at_the_programs_own_line(reports, name):
    report = reports["default"][name]
    lines = report.splitlines()
    marked = [i for i, line in enumerate(lines) if line.startswith(">")]
    assert marked, report
    assert LINES[name] in lines[marked[-1]], report  # the innermost entry's line


@pytest.mark.parametrize("name", ["test_deadlock", "test_limit"])
def test_a_failure_report_starts_in_the_test(reports, name):
    report = reports["default"][name]
    code = [line.strip() for line in report.splitlines() if line.strip()]
    assert code[:2] == ["@MARK", f"async def {name}():"], report


@pytest.mark.parametrize("name", ["test_deadlock", "test_limit", "test_sync_run_deadlock"])
def test_full_trace_still_shows_every_frame(reports, name):
    report = reports["full"][name]
    assert "_loop.py" in report and "base_events.py" in report, report
    assert LINES[name] in report


def test_the_loop_errors_read_as_pywheel_testing(reports):
    assert (
        "E       pywheel.testing.DeadlockError: deadlock at" in reports["default"]["test_deadlock"]
    )
    assert "E       pywheel.testing.TimeLimitError:" in reports["default"]["test_limit"]
    assert "_loop.DeadlockError" not in reports["default"]["test_deadlock"]


# ---- public names ------------------------------------------------------------


def test_every_public_class_and_function_is_pywheel_testings():
    for name in testing.__all__:
        obj = getattr(testing, name)
        if isinstance(obj, type) or callable(obj):
            assert obj.__module__ == "pywheel.testing", name


@pytest.mark.parametrize(
    "cls", [testing.DeadlockError, testing.TimeLimitError, testing.VirtualTimeError]
)
def test_the_errors_pickle_and_repr_under_their_public_name(cls):
    exc = cls("the message")
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is cls and again.args == ("the message",)
    assert repr(cls) == f"<class 'pywheel.testing.{cls.__name__}'>"
    assert repr(exc) == f"{cls.__name__}('the message')"
    assert "".join(traceback.format_exception_only(exc)).startswith(
        f"pywheel.testing.{cls.__name__}: the message"
    )


def test_public_functions_and_timings_pickle_by_reference():
    assert pickle.loads(pickle.dumps(testing.run)) is testing.run
    assert pickle.loads(pickle.dumps(testing.VirtualEventLoop)) is testing.VirtualEventLoop
    timing = testing.Timing(max_late=0.01)
    assert repr(pickle.loads(pickle.dumps(timing))) == repr(timing) == "Timing(max_late=0.01)"


# ---- which frames are hidden -------------------------------------------------


def test_pywheels_frames_stay_in_the_report_of_a_bug_of_pywheels():
    # An exception pywheel's code never raises on purpose, raised there: a
    # bug of pywheel's, whose frames are then the story.
    with pytest.raises(AttributeError) as bug:
        _loop._await_frames(None)
    assert _tracebacks.hide(bug) is False
    # On purpose (a refused argument), or raised in the user's code: hidden.
    with pytest.raises(TypeError) as refused:
        testing.VirtualEventLoop(start="soon")
    assert _tracebacks.hide(refused) is True
    assert _tracebacks.hide(None) is True


# ---- TimeLimitError -----------------------------------------------------------


class Poller:
    def __init__(self, loop):
        self.loop = loop
        loop.call_later(1, self.tick)

    def tick(self):
        self.loop.call_later(1, self.tick)


def limit_error(main, limit=100, **kwargs) -> testing.TimeLimitError:
    with pytest.raises(testing.TimeLimitError) as info:
        testing.run(main(), limit=limit, **kwargs)
    return info.value


def test_time_limit_error_names_the_sleeping_task_whose_timer_is_next():
    async def fast():
        while True:
            await asyncio.sleep(0.7)  # the next timer's owner

    async def slow():
        await asyncio.sleep(10**6)

    async def main():
        asyncio.ensure_future(fast())
        asyncio.ensure_future(slow())
        await asyncio.Event().wait()

    msg = str(limit_error(main))
    assert re.search(r"the next timer is: task in fast\(\) at test_testing_reports.py:\d+", msg)
    assert re.search(r"waiting: task in main\(\) at test_testing_reports.py:\d+", msg)


def test_time_limit_error_names_the_callback_whose_timer_is_next():
    async def main():
        Poller(asyncio.get_running_loop())
        async with asyncio.timeout(10**6):
            await asyncio.Event().wait()

    msg = str(limit_error(main))
    assert re.search(
        r"the next timer is: Poller.tick\(\) defined at test_testing_reports.py:\d+", msg
    )
    # under a Timing that wakes late, from the loop's own record of owners
    timing = testing.Timing(max_late=0.01, draw=lambda n: 0)
    msg = str(limit_error(main, timing=timing))
    assert re.search(
        r"the next timer is: Poller.tick\(\) defined at test_testing_reports.py:\d+", msg
    )


def test_time_limit_error_names_the_timeout_whose_timer_is_next():
    async def slow():
        await asyncio.sleep(10**6)

    async def main():
        asyncio.ensure_future(slow())
        async with asyncio.timeout(150):
            await asyncio.Event().wait()

    msg = str(limit_error(main))
    assert re.search(r"the next timer is: task in main\(\) at .*:\d+ \(a timeout\)", msg), msg


def test_time_limit_error_of_a_busy_loop_names_what_was_ready():
    async def spin():
        while True:
            await asyncio.sleep(0)

    msg = str(limit_error(spin, limit=0.1))
    assert re.search(r"ready: task in spin\(\) at test_testing_reports.py:\d+", msg), msg


@pytest.mark.parametrize("error", [testing.TimeLimitError, testing.DeadlockError])
def test_the_loops_error_has_the_programs_frames_innermost(error):
    async def inner():
        if error is testing.DeadlockError:
            await asyncio.get_running_loop().create_future()
        while True:
            await asyncio.sleep(1)

    async def main():
        await asyncio.create_task(inner())

    with pytest.raises(error) as info:
        testing.run(main(), limit=10)
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert names[-2:] == ["main", "inner"], names
    assert "run_until_complete" in names  # the loop's frames are still there, before
