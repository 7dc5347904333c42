"""Shared fixtures: a ManualWheel, a threaded Wheel and either (all closed
afterwards), and the collectors of what the default exception handler logs
and of what reaches sys.unraisablehook."""

import logging
import sys

import pytest

import pywheel


@pytest.fixture
def manual():
    """A ManualWheel at t=0 with a 1 ms tick."""
    w = pywheel.ManualWheel(tick=0.001)
    yield w
    w.close()


@pytest.fixture
def wheel():
    """A threaded Wheel with the default 1 ms tick."""
    w = pywheel.Wheel()
    yield w
    w.close(timeout=5)


@pytest.fixture(params=["manual", "threaded"])
def anywheel(request):
    """Each test twice: on a ManualWheel (1 ms tick) and on a threaded Wheel."""
    w = pywheel.ManualWheel(tick=0.001) if request.param == "manual" else pywheel.Wheel()
    yield w
    w.close(timeout=5)


@pytest.fixture
def pywheel_log():
    """Records what the default exception handler logs, from any thread."""
    from helpers import ListHandler

    logger = logging.getLogger("pywheel")
    handler = ListHandler()
    logger.addHandler(handler)
    old = logger.propagate
    logger.propagate = False  # keep pytest's own capture out of the way
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.propagate = old


@pytest.fixture
def unraisable():
    """Collects what reaches sys.unraisablehook (from any thread)."""
    got = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: got.append((u.exc_type, u.exc_value, u.err_msg))
    try:
        yield got
    finally:
        sys.unraisablehook = old


# ---- hypothesis profiles -----------------------------------------------------
# default: quick, for the test command.  ci: the same, derandomized, so a CI run
# is reproducible.  deep: many thousands of examples (PYWHEEL_HYPOTHESIS=deep).
# Every failure prints a @reproduce_failure blob, and the local example
# database replays it on the next run.
import os  # noqa: E402

from hypothesis import HealthCheck, settings  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/wheel_cffi.py

from helpers import CSRC, NO_CSRC  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before -m quick selects by marks
def pytest_collection_modifyitems(config, items):
    from quick import is_quick  # the quick set (tests/quick.py)

    for item in items:
        if is_quick(item):
            item.add_marker(pytest.mark.quick)
    if os.path.isdir(CSRC):
        return
    for item in items:
        if item.path.name == "test_c.py":
            item.add_marker(pytest.mark.skip(reason=NO_CSRC))


settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci", parent=settings.get_profile("default"), derandomize=True, database=None
)
settings.register_profile(
    "deep",
    max_examples=10_000,
    stateful_step_count=120,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("PYWHEEL_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "default")
)
