"""pytest plugin for pywheel.testing (registered through the ``pytest11`` entry
point, so installing pywheel is enough):

- ``virtual_loop`` fixture: a ``VirtualEventLoop`` (closed afterwards);
- ``@pytest.mark.virtual_time(**kwargs)``: runs an ``async def`` test on
  virtual time (``kwargs`` go to ``VirtualEventLoop``: ``start``, ``tick``,
  ``limit``, ``autojump_threshold``, ``timing``, ``clocks``, ``quantum``); if the test also
  takes ``virtual_loop``, it runs on that loop;
- ``clocks=``'s default for both: ``--virtual-time-clocks=on|off`` or the
  ``virtual_time_clocks`` ini option (default on);
- ``--virtual-time`` (ini ``virtual_time = true``): every event loop the
  session makes is a ``VirtualEventLoop`` (see ``_session``), no conftest;
- ``--virtual-time-limit=SECONDS``: each loop made during a test (and the
  marker's and fixture's, unless the marker says) may not pass that much
  virtual time;
- ``--virtual-time-quantum=SECONDS``: the ``quantum`` of every loop the
  plugin makes (unless the marker says; 0: exact readings);
- ``--timing-fuzz=N`` with ``--timing-max-late``/``--timing-max-cost``/
  ``--timing-max-jitter`` (with none given, ``timings()``'s defaults; given
  any, the others are 0) and ``--timing-seed``: each async test runs once
  punctually and then N more times under drawn Timings; a failure's report
  shows the virtual time and a ``--timing-replay=TOKEN`` line that reruns
  exactly that schedule.

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

from . import _session
from ._timing import DEFAULT_BOUNDS, DEFAULT_MAX_COST, DEFAULT_MAX_JITTER, DEFAULT_MAX_LATE


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
    group.addoption(
        "--virtual-time",
        action="store_true",
        default=None,
        help="every event loop made during the session (asyncio.run, asyncio.Runner, "
        "pytest-asyncio, anyio, IsolatedAsyncioTestCase) is a pywheel.testing "
        "VirtualEventLoop (or the virtual_time ini option)",
    )
    group.addoption(
        "--virtual-time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="virtual seconds each loop made during a test may run (TimeLimitError past it)",
    )
    group.addoption(
        "--virtual-time-quantum",
        type=float,
        default=None,
        metavar="SECONDS",
        help="virtual seconds each loop iteration that does not jump takes, in every "
        "VirtualEventLoop made by the plugin (default 1e-05; 0: exact readings, and a "
        "program that polls the clock while it works spins)",
    )
    group.addoption(
        "--timing-fuzz",
        type=int,
        default=0,
        metavar="N",
        help="run each async test N more times under drawn Timings (implies --virtual-time; "
        "bounds: --timing-max-late/-cost/-jitter, or with none of them given timings()'s "
        f"defaults, max_late={DEFAULT_MAX_LATE}, max_cost={DEFAULT_MAX_COST}, "
        f"max_jitter={DEFAULT_MAX_JITTER})",
    )
    for name, what in (
        ("late", "how late the loop may wake for a timer"),
        ("cost", "how long each callback may take"),
        ("jitter", "how late each call_external()/latency() event may arrive"),
    ):
        group.addoption(
            f"--timing-max-{name}",
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"--timing-fuzz: {what} (seconds; default {DEFAULT_BOUNDS['max_' + name]} "
            "if no --timing-max-* is given, else 0)",
        )
    group.addoption(
        "--timing-seed",
        type=int,
        default=0,
        help="--timing-fuzz: the seed the schedules are drawn from (default 0)",
    )
    group.addoption(
        "--timing-replay",
        default=None,
        metavar="TOKEN",
        help="rerun each selected async test once under the schedule a --timing-fuzz "
        "report named (implies --virtual-time)",
    )
    parser.addini(
        "virtual_time",
        type="bool",
        default=False,
        help="make every event loop of the session a pywheel.testing VirtualEventLoop",
    )
    parser.addini(
        "virtual_time_clocks",
        type="bool",
        default=True,
        help="default of clocks= for pywheel.testing's marker and fixture (true)",
    )


class _Settings:
    __slots__ = ("on", "limit", "fuzz", "bounds", "seed", "replay")


def _settings(config: pytest.Config) -> _Settings:
    st = _Settings()
    st.limit = config.getoption("virtual_time_limit", None)
    if st.limit is not None and not (st.limit >= 0):
        raise pytest.UsageError(f"--virtual-time-limit must be >= 0, got {st.limit!r}")
    st.fuzz = config.getoption("timing_fuzz", 0) or 0
    if st.fuzz < 0:
        raise pytest.UsageError(f"--timing-fuzz must be >= 0, got {st.fuzz!r}")
    given = {n: config.getoption(f"timing_max_{n}", None) for n in ("late", "cost", "jitter")}
    if all(v is None for v in given.values()):
        # None given: timings()'s defaults (one source: DEFAULT_BOUNDS);
        # given any, the others are 0, as for timings().
        given = {n: DEFAULT_BOUNDS[f"max_{n}"] for n in given}
    try:
        st.bounds = tuple(
            _session._check_max(f"--timing-max-{n}", 0.0 if v is None else v)
            for n, v in given.items()
        )
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if st.fuzz and not any(st.bounds):
        raise pytest.UsageError(
            "--timing-fuzz needs at least one non-zero bound, in seconds: "
            "--timing-max-late (the loop wakes late), --timing-max-cost (callbacks take "
            "time) or --timing-max-jitter (the outside world answers late); with all "
            "three 0 every run is punctual (give none of them for timings()'s defaults)"
        )
    st.seed = config.getoption("timing_seed", 0) or 0
    token = config.getoption("timing_replay", None)
    try:
        st.replay = _session.Schedule.parse(token) if token is not None else None
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    on = config.getoption("virtual_time", None)
    if on is None:
        on = bool(config.getini("virtual_time"))
    st.on = bool(on or st.fuzz or st.replay is not None)
    return st


_SETTINGS = pytest.StashKey[_Settings]()


def pytest_configure(config: pytest.Config) -> None:
    st = _settings(config)
    config.stash[_SETTINGS] = st
    _session.session_clocks = _default_clocks(config)
    _session.quantum = _quantum(config)
    if st.on:
        _session.install()
    config.addinivalue_line(
        "markers",
        "virtual_time(start=0.0, tick=0.001, limit=None, autojump_threshold=0.05, "
        "timing=None, clocks=True, quantum=1e-05): run this async def test on pywheel.testing's "
        "virtual time",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_SETTINGS, None) is not None:
        _session.uninstall()
        _session.current = None


def pytest_report_header(config: pytest.Config):
    st = config.stash.get(_SETTINGS, None)
    if st is None or not st.on:
        return None
    line = "pywheel.testing: every event loop is a VirtualEventLoop"
    if st.limit is not None:
        line += f", limit {st.limit!r} s per test"
    if st.replay is not None:
        line += f"; replaying --timing-replay={st.replay.token}"
    elif st.fuzz:
        late, cost, jitter = st.bounds
        line += (
            f"; timing fuzz: {st.fuzz} runs per async test (max_late={late!r}, "
            f"max_cost={cost!r}, max_jitter={jitter!r}, seed={st.seed})"
        )
    return line


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_protocol")
def pytest_runtest_protocol_context(item: pytest.Item, nextitem):
    """Loops made while the test runs get its limit (and clocks default)."""
    st = item.config.stash.get(_SETTINGS, None)
    if st is None:
        return (yield)
    saved = _session.current
    _session.current = _session.Context(st.limit, _default_clocks(item.config), None)
    try:
        return (yield)
    finally:
        _session.current = saved


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """--timing-fuzz / --timing-replay: run an async test (setup, call,
    teardown: function-scoped fixtures, pytest-asyncio's loop among them, are
    made afresh each run) punctually, then under drawn schedules until one
    fails; log one run: the failing one, or else the punctual one."""
    st = item.config.stash.get(_SETTINGS, None)
    if st is None or not (st.fuzz or st.replay is not None) or not _session.is_async_test(item):
        return None
    from _pytest.runner import runtestprotocol

    if st.replay is not None:
        schedules = [st.replay]
    else:
        late, cost, jitter = st.bounds
        schedules = [None] + [
            _session.Schedule(late, cost, jitter, _session.seed_for(st.seed, item.nodeid, k))
            for k in range(1, st.fuzz + 1)
        ]
    clocks = _default_clocks(item.config)
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    shown = None
    for k, schedule in enumerate(schedules):
        ctx = _session.Context(st.limit, clocks, schedule)
        saved, _session.current = _session.current, ctx
        try:
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
        finally:
            _session.current = saved
        failed = any(r.failed for r in reports)
        if shown is None or failed:
            shown = reports
        if failed:
            if schedule is not None:
                _describe(item, reports, ctx, schedule, k, len(schedules) - 1, st)
            break
    for report in shown:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _describe(item, reports, ctx, schedule, k, n, st) -> None:
    times = ", ".join(f"t={t!r}" for t in ctx.virtual_times()) or "no loop was made"
    timings = [ref().timing for ref in ctx.loops if ref() is not None and ref().timing]
    lines = [
        (
            f"replaying --timing-replay={schedule.token}"
            if st.replay is not None
            else f"failed on timing-fuzz run {k} of {n} (run 0, punctual, passed)"
        ),
        f"virtual time at the end of each loop of the run: {times}",
    ]
    lines += [f"loop {i}: {t!r}" for i, t in enumerate(timings)]
    args = ["--virtual-time"]
    if st.limit is not None:
        args.append(f"--virtual-time-limit={st.limit!r}")
    if _session.quantum is not None:
        args.append(f"--virtual-time-quantum={_session.quantum!r}")
    lines.append(
        f"replay: pytest '{item.nodeid}' {' '.join(args)} --timing-replay={schedule.token}"
    )
    text = "\n".join(lines)
    for r in reports:
        if r.failed:
            r.sections.append(("pywheel.testing timing fuzz", text))


def _default_clocks(config: pytest.Config) -> bool:
    option = config.getoption("virtual_time_clocks", None)
    if option is not None:
        return option == "on"
    return bool(config.getini("virtual_time_clocks"))


def _quantum(config: pytest.Config) -> float | None:
    q = config.getoption("virtual_time_quantum", None)
    if q is not None and not (q == 0 or 1e-9 <= q < float("inf")):
        raise pytest.UsageError(
            f"--virtual-time-quantum must be 0 or a number of seconds >= 1e-9, got {q!r}"
        )
    return q


def _loop_kwargs(item) -> dict:
    marker = item.get_closest_marker("virtual_time")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    kwargs.setdefault("clocks", _default_clocks(item.config))
    ctx = _session.current
    if ctx is not None:
        # --virtual-time-limit and a fuzz run's Timing reach the marker's
        # and the fixture's loops too (the marker's own limit= wins).
        for name, value in ctx.kwargs().items():
            if name != "clocks":
                kwargs.setdefault(name, value)
    return kwargs


def _made(loop) -> None:
    if _session.current is not None:
        _session.current.made(loop)


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
    _made(loop)
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
        from ._loop import VirtualEventLoop

        coro = func(**kwargs)
        try:
            loop = VirtualEventLoop(**_loop_kwargs(pyfuncitem))
        except BaseException:
            coro.close()  # refused before it could run: no "never awaited" noise
            raise
        _made(loop)
        try:
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                runner.run(coro)
        finally:
            if not loop.is_closed():
                loop.close()
    return True
