"""pywheel.testing's pytest plugin (pytest11 entry point), and the documented
recipes for pytest-asyncio's and anyio's plugins, each in a fresh pytest."""

import pytest
from helpers import run_pytest

PLUGIN_TESTS = """
import asyncio, sys, time
import pytest
from pywheel.testing import VirtualEventLoop

def test_fixture(virtual_loop):
    assert isinstance(virtual_loop, VirtualEventLoop)
    virtual_loop.run_until_complete(asyncio.sleep(3600))
    assert 3600.0 < virtual_loop.time() < 3600.001  # and a few 10 µs iterations

@pytest.mark.virtual_time(limit=None)  # a day: past the plugin's default limit
async def test_marker():
    # Real time: time.monotonic() follows virtual time in the run (clocks=True).
    real = lambda: time.clock_gettime(time.CLOCK_MONOTONIC)
    t0 = real()
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualEventLoop)
    await asyncio.sleep(86400)
    assert 86400.0 < loop.time() < 86400.001 and real() - t0 < 5

@pytest.mark.virtual_time(start=100.0, limit=10)
async def test_marker_kwargs():
    assert 100.0 < asyncio.get_running_loop().time() < 100.001
    await asyncio.sleep(5)

@pytest.mark.virtual_time(limit=10)
async def test_limit_fails_the_test():
    await asyncio.sleep(11)

@pytest.mark.virtual_time(start=7.0)
async def test_marker_with_fixture(virtual_loop):
    assert asyncio.get_running_loop() is virtual_loop
    assert 7.0 < virtual_loop.time() < 7.001

def test_plain_sync_test_untouched():
    assert "hypothesis" not in sys.modules
"""

PYTEST_ASYNCIO_CONFTEST = """
import pytest
import pywheel.testing

@pytest.hookimpl(optionalhook=True)
def pytest_asyncio_loop_factories(config, item):
    return {"virtual": pywheel.testing.new_event_loop}
"""

PYTEST_ASYNCIO_TESTS = """
import asyncio
import pytest
import pytest_asyncio
from pywheel.testing import VirtualEventLoop

@pytest_asyncio.fixture
async def started():
    await asyncio.sleep(10)
    return asyncio.get_running_loop().time()

@pytest.mark.asyncio
async def test_on_virtual_time(started):
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualEventLoop)
    assert 10.0 < started < 10.001  # and a few 10 µs iterations
    await asyncio.sleep(3600)
    assert 3610.0 < loop.time() < 3610.001
"""

ANYIO_TESTS = """
import asyncio
import anyio
import pytest
import pywheel.testing

@pytest.fixture
def anyio_backend():
    return ("asyncio", {"loop_factory": pywheel.testing.new_event_loop})

@pytest.mark.anyio
async def test_on_virtual_time():
    loop = asyncio.get_running_loop()
    assert isinstance(loop, pywheel.testing.VirtualEventLoop)
    with anyio.fail_after(60):
        await anyio.sleep(30)
    assert 30.0 < anyio.current_time() < 30.001  # and a few 10 µs iterations
"""

AUTO_MODE_TESTS = """
import asyncio
import pytest
from pywheel.testing import VirtualEventLoop

@pytest.mark.virtual_time
async def test_marker_wins_in_auto_mode():
    assert isinstance(asyncio.get_running_loop(), VirtualEventLoop)
    await asyncio.sleep(3600)

async def test_pytest_asyncio_keeps_the_rest():
    assert not isinstance(asyncio.get_running_loop(), VirtualEventLoop)
"""


_pytest = run_pytest


def test_fixture_and_marker_without_pytest_asyncio_anyio_or_hypothesis(tmp_path):
    r = _pytest(
        tmp_path,
        {"test_plugin.py": PLUGIN_TESTS},
        "-p", "no:asyncio", "-p", "no:anyio", "-p", "no:hypothesispytest",
    )  # fmt: skip
    assert "1 failed, 5 passed" in r.stdout, r.stdout + r.stderr
    assert "TimeLimitError" in r.stdout and "test_limit_fails_the_test" in r.stdout


def test_marker_is_registered(tmp_path):
    r = _pytest(tmp_path, {"test_x.py": "def test_x(): pass\n"}, "--markers")
    assert "@pytest.mark.virtual_time" in r.stdout


def test_pytest_asyncio_recipe(tmp_path):
    pytest.importorskip("pytest_asyncio")
    r = _pytest(
        tmp_path,
        {"conftest.py": PYTEST_ASYNCIO_CONFTEST, "test_pa.py": PYTEST_ASYNCIO_TESTS},
        "-o", "asyncio_default_fixture_loop_scope=function",
    )  # fmt: skip
    assert "1 passed" in r.stdout, r.stdout + r.stderr


def test_anyio_recipe(tmp_path):
    pytest.importorskip("anyio")
    r = _pytest(tmp_path, {"test_anyio.py": ANYIO_TESTS})
    assert "1 passed" in r.stdout, r.stdout + r.stderr


def test_marker_wins_over_pytest_asyncio_auto_mode(tmp_path):
    pytest.importorskip("pytest_asyncio")
    r = _pytest(
        tmp_path,
        {"test_auto.py": AUTO_MODE_TESTS},
        "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
    )  # fmt: skip
    assert "2 passed" in r.stdout, r.stdout + r.stderr
