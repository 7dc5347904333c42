"""The quick set: `python -m pytest -m quick`, "does it work here?" in seconds.

A few tests from each area a newcomer's machine can break: the C core built
with this machine's compiler, a threaded Wheel, the asyncio loops, virtual
time, the timing fuzz, the pytest plugin and the demo.  Each is fast (about a
second or less, most far less, measured on 2 loaded cores) and needs nothing
beyond the test extra.  tests/conftest.py marks them `quick`;
tests/test_quick.py checks that every area keeps at least one test and that
every name below still names a test (a rename cannot shrink the set
silently).  The full suite, which CI runs, stays `python -m pytest`.

Why a list here rather than @pytest.mark.quick on each test: the set is read,
and balanced across areas, in one place; the marks are added at collection.
"""

# area -> (test file, test function): every parametrized case of that
# function is in the set.
QUICK: dict[str, list[tuple[str, str]]] = {
    "the C core, built with this machine's compiler": [
        ("test_c.py", "test_wheel_randomized_against_model"),
        ("test_c.py", "test_driver_thread_from_c"),
    ],
    "a threaded Wheel": [
        ("test_never_early.py", "test_never_early_threaded"),
        ("test_order.py", "test_order_threaded_call_at_near_future"),
        ("test_stats.py", "test_stats_conservation_threaded"),
    ],
    "the asyncio loops (WheelEventLoop, pywheel.uvloop)": [
        ("test_asyncio.py", "test_call_later_order_and_never_early"),
        ("test_asyncio.py", "test_sleep_wait_for_timeout"),
        ("test_pywheel_uvloop.py", "test_never_early_by_loop_time"),
    ],
    "virtual time": [
        ("test_testing_loop.py", "test_same_order_and_timestamps_as_stock_asyncio"),
        ("test_testing_loop.py", "test_sockets_work_and_virtual_timeouts_still_fire"),
    ],
    "the timing fuzz": [
        ("test_testing_timing.py", "test_replay_is_exact_and_does_not_draw_again"),
        ("test_testing_timing.py", "test_deadline_order_never_early_monotonic_clock"),
        ("test_timing_minimize.py", "test_minimize_ends_on_the_one_decision_that_matters"),
    ],
    "the pytest plugin (--virtual-time, --timing-fuzz)": [
        (
            "test_testing_pytest.py",
            "test_fixture_and_marker_without_pytest_asyncio_anyio_or_hypothesis",
        ),
        ("test_virtual_time_option.py", "test_fuzz_reaches_the_marker_and_spares_sync_tests"),
    ],
    "the demo (python -m pywheel)": [
        ("test_demo.py", "test_every_figure_has_its_median_and_its_range"),
    ],
}

NAMES = {entry for entries in QUICK.values() for entry in entries}


def is_quick(item) -> bool:
    return (item.path.name, getattr(item, "originalname", item.name)) in NAMES
