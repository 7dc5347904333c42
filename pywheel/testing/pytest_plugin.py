"""pytest plugin for pywheel.testing (registered through the ``pytest11`` entry
point, so installing pywheel is enough):

- ``virtual_loop`` fixture: a ``VirtualEventLoop`` (closed afterwards);
- ``@pytest.mark.virtual_time(**kwargs)``: runs an ``async def`` test on
  virtual time (``kwargs`` go to ``VirtualEventLoop``: ``start``, ``tick``,
  ``limit``, ``autojump_threshold``, ``timing``, ``clocks``); if the test also
  takes ``virtual_loop``, it runs on that loop;
- ``clocks=``'s default for both: ``--virtual-time-clocks=on|off`` or the
  ``virtual_time_clocks`` ini option (default on).

It imports neither hypothesis, pytest-asyncio nor anyio.  To run tests of
those plugins on virtual time, give them the loop factory (README, "Testing
code that depends on time"):

- pytest-asyncio: ``@pytest.hookimpl(optionalhook=True) def
  pytest_asyncio_loop_factories(config, item): return {"virtual":
  pywheel.testing.new_event_loop}`` in a conftest.py (optionalhook: the
  conftest still loads in a run without pytest-asyncio);
- anyio: an ``anyio_backend`` fixture returning
  ``("asyncio", {"loop_factory": pywheel.testing.new_event_loop})``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pywheel", "pywheel.testing (virtual time)")
    group.addoption(
        "--virtual-time-clocks",
        choices=("on", "off"),
        default=None,
        help="whether time.monotonic()/perf_counter()/time() (and their _ns twins) "
        "follow virtual time on the loop's thread in virtual_time tests and the "
        "virtual_loop fixture (default: on, or the virtual_time_clocks ini option)",
    )
    parser.addini(
        "virtual_time_clocks",
        type="bool",
        default=True,
        help="default of clocks= for pywheel.testing's marker and fixture (true)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "virtual_time(start=0.0, tick=0.001, limit=None, autojump_threshold=0.05, "
        "timing=None, clocks=True): run this async def test on pywheel.testing's "
        "virtual time",
    )


def _default_clocks(config: pytest.Config) -> bool:
    option = config.getoption("virtual_time_clocks", None)
    if option is not None:
        return option == "on"
    return bool(config.getini("virtual_time_clocks"))


def _loop_kwargs(item) -> dict:
    marker = item.get_closest_marker("virtual_time")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    kwargs.setdefault("clocks", _default_clocks(item.config))
    return kwargs


def _close(loop) -> None:
    """asyncio.Runner's cleanup: cancel what is left, finish async
    generators and the default executor, close."""
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


@pytest.fixture
def virtual_loop(request):
    """A ``pywheel.testing.VirtualEventLoop`` (set as the current event loop),
    configured by the test's ``virtual_time`` marker if it has one."""
    from ._loop import VirtualEventLoop

    loop = VirtualEventLoop(**_loop_kwargs(request.node))
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        asyncio.set_event_loop(None)
        if not loop.is_closed():
            _close(loop)


def _coroutine_function(obj):
    if inspect.iscoroutinefunction(obj):
        return obj
    # pytest-asyncio (auto mode) wraps every async test in a sync function.
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None and inspect.iscoroutinefunction(wrapped):
        return wrapped
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    if pyfuncitem.get_closest_marker("virtual_time") is None:
        return None
    func = _coroutine_function(pyfuncitem.obj)
    if func is None:
        raise pytest.UsageError(
            f"{pyfuncitem.nodeid}: @pytest.mark.virtual_time needs an async def test"
        )
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    loop: Any = pyfuncitem.funcargs.get("virtual_loop")
    if loop is not None:
        loop.run_until_complete(func(**kwargs))
    else:
        from ._loop import run

        run(func(**kwargs), **_loop_kwargs(pyfuncitem))
    return True
