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
- a per-test virtual-time limit (``DEFAULT_LIMIT``, 7200 s, unless
  ``--virtual-time-limit=SECONDS|none``, the ``virtual_time_limit`` ini
  option or ``@pytest.mark.virtual_time_limit(SECONDS|None)`` says
  otherwise): no loop the plugin makes or configures (every loop under
  ``--virtual-time``, the marker's unless it gives ``limit=``, the
  fixture's) may pass that much virtual time in one test, a loop shared by
  several tests getting a fresh budget for each;
- ``--virtual-time-quantum=SECONDS``: the ``quantum`` of every loop the
  plugin makes (unless the marker says; 0: exact readings);
- ``--timing-fuzz=N`` with ``--timing-max-late``/``--timing-max-cost``/
  ``--timing-max-jitter`` (with none given, ``timings()``'s defaults; given
  any, the others are 0), ``--timing-seed`` and ``--timing-escalate=TOP``
  (the runs climb a ladder of those bounds times 1, 2.5, 5, ... up to TOP,
  and a failure names its level: ``_session.schedules``): each async test runs once
  punctually and then N more times under drawn Timings, on whatever loop it
  runs on (a module- or session-scoped loop is lent each run's Timing: see
  ``_session.Context``); a run in which no VirtualEventLoop ran is an error;
  a failure's report shows the virtual time and a replay line (the command
  as it was given, the test, ``--timing-replay=TOKEN``) that reruns exactly
  that schedule;
- on such a failure, two more runs, traced (``testing.Trace``): the punctual
  run and the failing Timings replayed; the report's "pywheel.testing race"
  section says where the two runs part, and ``--timing-trace=DIR`` (ini
  ``timing_trace``) writes DIR/<test>.perfetto.json and DIR/<test>.svg.
- ``--timing-minimize[=SECONDS]`` (ini ``timing_minimize``): a failing fuzz
  run is minimized by default (``DEFAULT_MINIMIZE`` seconds of real time; 0:
  off): the test is rerun under fewer and smaller decisions while it fails
  the same way, and the report shows that run, its Timing and a token of its
  decisions; with ``--timing-replay`` it minimizes the replayed failure.

It imports neither hypothesis, pytest-asyncio nor anyio.  To run tests of
those plugins on virtual time, give them the loop factory
(docs/howto/pytest-asyncio.md, docs/howto/anyio.md):

- pytest-asyncio: ``@pytest.hookimpl(optionalhook=True) def
  pytest_asyncio_loop_factories(config, item): return {"virtual":
  pywheel.testing.new_event_loop}`` in a conftest.py (optionalhook: the
  conftest still loads in a run without pytest-asyncio);
- anyio: an ``anyio_backend`` fixture returning
  ``("asyncio", {"loop_factory": pywheel.testing.new_event_loop})``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import math
import os
import shlex
import shutil
import sys
from typing import Any

import pytest

from .._tracebacks import hide as __tracebackhide__  # noqa: F401  (pytest: see there)
from . import _session
from ._shrink import DEFAULT_MINIMIZE
from ._timing import (
    DEFAULT_BOUNDS,
    DEFAULT_MAX_COST,
    DEFAULT_MAX_JITTER,
    DEFAULT_MAX_LATE,
    Timing,
)

#: Virtual seconds a test may pass on any loop the plugin makes or configures,
#: when nothing says otherwise.  Without a limit, a test that awaits what
#: nobody sets while a repeating timer exists (a session fixture's heartbeat,
#: a 100 ms poller) jumps from timer to timer for ever at 100 % CPU.  Two
#: hours: above the hour tests often simulate (a ``sleep(3600)``, an hourly
#: job, with room for what runs around it), so a legit test rarely reaches
#: it; and reached quickly by what spins: one loop iteration per timer costs
#: about 22 us here (a lone ``sleep()`` loop, load 6), so a 1 s heartbeat
#: gets there in 0.2 s of real time, a 100 ms poller in 1.6 s, a 10 ms one in
#: 16 s.  A day (86400) would leave the 100 ms poller spinning 19 s and the
#: 10 ms one over three minutes, silent all along.
DEFAULT_LIMIT = 7200.0


_LIMIT_TAKES = "seconds >= 0 (e.g. 60), or none for no limit"


def _minimize_value(text) -> float:
    """--timing-minimize's or the ini option's seconds (>= 0; 0: off)."""
    if isinstance(text, str):
        text = text.strip()
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(
            f"--timing-minimize takes seconds of real time (0: off), attached with "
            f"'=' (--timing-minimize=10), not {text!r}"
        ) from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"--timing-minimize must be a finite number of seconds >= 0, got {text!r}")
    return value


def _minimize_option(text: str) -> float:
    try:
        return _minimize_value(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit_value(text) -> float | None:
    """A limit as the option, the ini file or the marker gives it: seconds
    >= 0, or none / inf / None for no limit."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("none", "inf")):
        return None
    value = _number(text, _LIMIT_TAKES)
    if math.isinf(value) and value > 0:
        return None
    if not value >= 0:
        raise ValueError(f"{text!r} is not >= 0: a virtual-time limit is {_LIMIT_TAKES}")
    return value


# ---- option values -----------------------------------------------------------
#
# Each option's value is checked where argparse reads it (a bad one is a
# pytest UsageError, ``argument --option: ...``), by a function that says
# what was given and what the option takes, and never only what Python's
# float() or int() said about it.


def _number(text, takes: str) -> float:
    """``text`` as a float, or ValueError saying what it takes."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"{text!r} is not a number: it takes {takes}")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise ValueError(f"{text!r} is not a number: it takes {takes}")
    return value


def _option_type(check):
    """An argparse ``type=`` from ``check(text)``, whose ValueError is the
    option's message."""

    def convert(text: str):
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = check.__name__  # argparse names a refused value's type by it
    return convert


def _limit_option(text: str) -> float:
    """--virtual-time-limit's value (inf for none: None means not given)."""
    value = _limit_value(text)
    return math.inf if value is None else value


_QUANTUM_TAKES = "0, or seconds >= 1e-9 (the clock keeps whole nanoseconds), e.g. 1e-05"


def _quantum_option(text: str) -> float:
    value = _number(text, _QUANTUM_TAKES)
    if not (value == 0 or 1e-9 <= value < math.inf):
        raise ValueError(f"{text!r} is out of range: it takes {_QUANTUM_TAKES}")
    return value


def _whole(text: str, takes: str, lo: int | None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number: it takes {takes}") from None
    if lo is not None and value < lo:
        raise ValueError(f"{text!r} is below {lo}: it takes {takes}")
    return value


def _fuzz_option(text: str) -> int:
    return _whole(text, "a whole number of runs >= 0 (e.g. 100; 0: no fuzz)", 0)


def _seed_option(text: str) -> int:
    return _whole(text, "a whole number (e.g. 0)", None)


_BOUND_TAKES = "seconds, a finite number >= 0 (e.g. 0.02)"


def _bound_option(text: str) -> float:
    value = _number(text, _BOUND_TAKES)
    if not (0 <= value < math.inf):
        raise ValueError(f"{text!r} is out of range: it takes {_BOUND_TAKES}")
    return value


#: The options that only mean something with --timing-fuzz=N.
_FUZZ_ONLY = ("--timing-max-late", "--timing-max-cost", "--timing-max-jitter", "--timing-seed")


def _check_fuzz_only(config: pytest.Config, fuzz: int, replay) -> None:
    """A bound or seed given on the command line without --timing-fuzz=N
    does nothing: a UsageError rather than a run that looks fuzzed and is
    not.  Given in the ini file's addopts (or PYTEST_ADDOPTS) it is the
    project's standing choice for when the fuzz is on: left alone."""
    if fuzz and replay is None:
        return
    for arg in config.invocation_params.args:
        arg = str(arg)
        name = arg.partition("=")[0]
        if name in _FUZZ_ONLY:
            arg = f"{name}={config.getoption(name[2:].replace('-', '_'))}"
            if replay is not None:
                raise pytest.UsageError(
                    f"{arg} does nothing with --timing-replay: the token carries the "
                    f"bounds and seed of the run it replays; drop {name}"
                )
            raise pytest.UsageError(
                f"{arg} does nothing without --timing-fuzz=N (N >= 1, the runs under "
                f"drawn Timings): add --timing-fuzz=N, or drop {name}"
            )


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
        type=_option_type(_limit_option),
        default=None,
        metavar="SECONDS",
        help="virtual seconds a test may pass on each loop the plugin makes or configures "
        f"(TimeLimitError past it; default {DEFAULT_LIMIT:g}, or the virtual_time_limit ini "
        "option; none: no limit)",
    )
    group.addoption(
        "--virtual-time-quantum",
        type=_option_type(_quantum_option),
        default=None,
        metavar="SECONDS",
        help="virtual seconds each loop iteration that does not jump takes, in every "
        "VirtualEventLoop made by the plugin (default 1e-05; 0: exact readings, and a "
        "program that polls the clock while it works spins)",
    )
    group.addoption(
        "--timing-fuzz",
        type=_option_type(_fuzz_option),
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
            type=_option_type(_bound_option),
            default=None,
            metavar="SECONDS",
            help=f"--timing-fuzz: {what} (seconds; default {DEFAULT_BOUNDS['max_' + name]} "
            "if no --timing-max-* is given, else 0)",
        )
    group.addoption(
        "--timing-escalate",
        type=float,
        default=None,
        metavar="TOP",
        help="--timing-fuzz: the N runs climb a ladder of bounds, the given (or default) "
        "bounds times 1, 2.5, 5, 10, ... up to TOP (> 1, at most 1000), and a failure's "
        "report names the smallest level that broke the test (default: off, every run "
        "at the given bounds)",
    )
    group.addoption(
        "--timing-seed",
        type=_option_type(_seed_option),
        default=0,
        help="--timing-fuzz: the seed the schedules are drawn from (default 0)",
    )
    group.addoption(
        "--timing-trace",
        default=None,
        metavar="DIR",
        help="--timing-fuzz / --timing-replay: on a failure, also write DIR/<test>.perfetto.json "
        "(ui.perfetto.dev, chrome://tracing) and DIR/<test>.svg: the punctual and the failing "
        "run, traced (or the timing_trace ini option)",
    )
    group.addoption(
        "--timing-replay",
        default=None,
        metavar="TOKEN",
        help="rerun each selected async test once under the schedule a --timing-fuzz "
        "report named (implies --virtual-time)",
    )
    group.addoption(
        "--timing-minimize",
        nargs="?",
        const=DEFAULT_MINIMIZE,
        type=_minimize_option,
        default=None,
        metavar="SECONDS",
        help="real seconds to minimize a failing --timing-fuzz run for (default "
        f"{DEFAULT_MINIMIZE:g}, or the timing_minimize ini option; 0: off); with "
        "--timing-replay, minimize the replayed failure (give the seconds with '=')",
    )
    parser.addini(
        "virtual_time",
        type="bool",
        default=False,
        help="make every event loop of the session a pywheel.testing VirtualEventLoop",
    )
    parser.addini(
        "timing_trace",
        default=None,
        help="--timing-fuzz: the folder --timing-trace writes a failure's trace and picture to",
    )
    parser.addini(
        "virtual_time_limit",
        default=None,
        help=f"virtual seconds a test may pass on each loop (default {DEFAULT_LIMIT:g}; none: "
        "no limit)",
    )
    parser.addini(
        "timing_minimize",
        default=None,
        help=f"real seconds to minimize a failing --timing-fuzz run for (default "
        f"{DEFAULT_MINIMIZE:g}; 0: off)",
    )
    parser.addini(
        "virtual_time_clocks",
        type="bool",
        default=True,
        help="default of clocks= for pywheel.testing's marker and fixture (true)",
    )


class _Settings:
    __slots__ = ("on", "limit", "limit_given", "fuzz", "bounds", "seed", "replay", "minimize")
    __slots__ += ("hypothesis_minimize",)


def _settings(config: pytest.Config) -> _Settings:
    st = _Settings()
    option = config.getoption("virtual_time_limit", None)
    st.limit_given = option is not None or config.getini("virtual_time_limit") not in (None, "")
    if option is not None:
        st.limit = None if math.isinf(option) else option
    else:
        ini = config.getini("virtual_time_limit")
        try:
            st.limit = DEFAULT_LIMIT if ini in (None, "") else _limit_value(ini)
        except ValueError as exc:
            raise pytest.UsageError(f"virtual_time_limit (ini): {exc}") from None
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
    _check_fuzz_only(config, st.fuzz, st.replay)
    st.minimize = _minimize_setting(config, st.replay is not None)
    st.hypothesis_minimize = _minimize_setting(config, False)
    on = config.getoption("virtual_time", None)
    if on is None:
        on = bool(config.getini("virtual_time"))
    st.on = bool(on or st.fuzz or st.replay is not None)
    return st


def _minimize_setting(config: pytest.Config, replay: bool) -> float:
    """Seconds to minimize a failing run for (0: off).  A replay is not
    minimized unless --timing-minimize says so: it shows the very run its
    token names."""
    option = config.getoption("timing_minimize", None)
    if option is not None:
        return option
    if replay:
        return 0.0
    ini = config.getini("timing_minimize")
    if ini in (None, ""):
        return DEFAULT_MINIMIZE
    try:
        return _minimize_value(ini)
    except ValueError as exc:
        raise pytest.UsageError(f"timing_minimize (ini): {exc}") from None


_SETTINGS = pytest.StashKey[_Settings]()
_ESCALATE = pytest.StashKey["float | None"]()


def _escalate(config: pytest.Config, st: _Settings) -> float | None:
    """--timing-escalate's TOP, checked (None: off; see _session.schedules)."""
    top = config.getoption("timing_escalate", None)
    if top is None:
        return None
    if not 1 < top <= _session.MAX_ESCALATE:
        raise pytest.UsageError(
            f"--timing-escalate is the top of the ladder, a factor of the bounds > 1 and "
            f"<= {_session.MAX_ESCALATE:g} (e.g. 10: x1, x2.5, x5, x10), got {top!r}"
        )
    if not st.fuzz:
        raise pytest.UsageError("--timing-escalate climbs the runs of --timing-fuzz=N: give both")
    if not all(math.isfinite(b * top) for b in st.bounds):
        raise pytest.UsageError(f"--timing-escalate={top!r}: the bounds times it overflow")
    return top


def _escalate_header(config: pytest.Config) -> str:
    top = config.stash.get(_ESCALATE, None)
    if top is None:
        return ""
    levels = ", ".join(f"x{f:g}" for f in _session.ladder(top))
    return f"; bounds escalate over the runs: {levels}"


def pytest_configure(config: pytest.Config) -> None:
    st = _settings(config)
    config.stash[_SETTINGS] = st
    _session.session_clocks = _default_clocks(config)
    _session.session_limit = st.limit
    _session.session_limit_given = st.limit_given
    _session.quantum = _quantum(config)
    if st.on:
        _session.install()
    config.stash[_ESCALATE] = _escalate(config, st)
    if st.fuzz or st.replay is not None:
        _session.watch_runs(True)
        config.pluginmanager.register(_FuzzSpan(), "pywheel-timing-fuzz-span")
    config.addinivalue_line(
        "markers",
        "virtual_time(start=0.0, tick=0.001, limit=None, autojump_threshold=0.05, "
        "timing=None, clocks=True, quantum=1e-05): run this async def test on pywheel.testing's "
        "virtual time",
    )
    config.addinivalue_line(
        "markers",
        f"virtual_time_limit(seconds): the virtual seconds this test may pass on each "
        f"loop pywheel.testing makes or configures (default {DEFAULT_LIMIT:g}; None: no "
        f"limit)",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_SETTINGS, None) is not None:
        _session.uninstall()
        _session.watch_runs(False)
        _session.current = None
        _session.session_limit = None


class _FuzzSpan:
    """Registered for --timing-fuzz / --timing-replay only."""

    @pytest.fixture(autouse=True)
    def _pywheel_timing_span(self):
        """Marks a fuzz run's *own part*: set up after every fixture of a wider
        scope and before the test's other function-scoped fixtures (autouse,
        from a plugin: first among them), torn down after them.  Loops that
        run inside it take the run's Timing (see ``_session.Context``)."""
        ctx = _session.current
        if ctx is None or ctx.schedule is None:
            yield
            return
        ctx.begin()
        try:
            yield
        finally:
            ctx.end()


def _context(item: pytest.Item, st: _Settings, schedule) -> _session.Context:
    ctx = _session.Context(_test_limit(item, st), _default_clocks(item.config), schedule)
    ctx.limit_given = st.limit_given or item.get_closest_marker("virtual_time_limit") is not None
    return ctx


def _test_limit(item: pytest.Item, st: _Settings) -> float | None:
    marker = item.get_closest_marker("virtual_time_limit")
    if marker is None:
        return st.limit
    if len(marker.args) + len(marker.kwargs) != 1 or set(marker.kwargs) - {"seconds"}:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.virtual_time_limit takes one argument, the "
            f"seconds (None: no limit)"
        )
    value = marker.args[0] if marker.args else marker.kwargs["seconds"]
    try:
        return _limit_value(value)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.virtual_time_limit: {exc}") from None


def pytest_report_header(config: pytest.Config):
    st = config.stash.get(_SETTINGS, None)
    if st is None or not st.on:
        return None
    line = "pywheel.testing: every event loop is a VirtualEventLoop"
    line += f", limit {st.limit!r} s per test" if st.limit is not None else ", no limit"
    if st.replay is not None:
        line += f"; replaying --timing-replay={st.replay.token}"
    elif st.fuzz:
        late, cost, jitter = st.bounds
        line += (
            f"; timing fuzz: {st.fuzz} runs per async test (max_late={late!r}, "
            f"max_cost={cost!r}, max_jitter={jitter!r}, seed={st.seed})"
        )
        line += _escalate_header(config)
    from . import _peers

    why = _peers.without_linux_path()
    if why is None:
        return line
    _peers._said = True  # said here, once: not again in a test's log
    return [
        line,
        f"pywheel.testing: {why}: every descriptor a virtual loop watches counts as "
        f"outside the loop (it waits autojump_threshold for it, never jumps early)",
    ]


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_protocol")
def pytest_runtest_protocol_context(item: pytest.Item, nextitem):
    """Loops made while the test runs get its limit (and clocks default)."""
    st = item.config.stash.get(_SETTINGS, None)
    if st is None:
        return (yield)
    saved = _session.enter(_context(item, st, None))
    try:
        return (yield)
    finally:
        _session.current = saved


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A hypothesis test: its first failure with a Timing of timings() is
    minimized, and the strategy plays the minimized decisions from then on
    (``_shrink``; --timing-minimize's budget, 0: off)."""
    st = item.config.stash.get(_SETTINGS, None)
    test = getattr(item, "obj", None)
    m = None
    if st is not None and st.hypothesis_minimize > 0 and hasattr(test, "hypothesis"):
        from . import _shrink

        m = _shrink.wrap(test, st.hypothesis_minimize)
    try:
        try:
            return (yield)
        except BaseException as exc:
            if m is None or not isinstance(exc, _shrink.Minimized):
                raise
            done = exc
        # Outside the except: the second run's failure is not chained to
        # the first one's (which it replaces).
        return _shrink.again(item.runtest, done)
    finally:
        if m is not None:
            _shrink.unwrap(test, m)


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_makereport")
def pytest_runtest_makereport_failure(item: pytest.Item, call):
    """A fuzz run remembers how it first failed (phase, exception type):
    its minimized run must fail the same way."""
    ctx = _session.current
    if ctx is not None and ctx.schedule is not None and ctx.failure is None:
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            ctx.failure = (call.when, call.excinfo.type)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """A TimeLimitError says how to change the plugin's limit."""
    st = item.config.stash.get(_SETTINGS, None)
    if st is not None and call.excinfo is not None:
        marker = item.get_closest_marker("virtual_time")
        if marker is not None and "limit" in marker.kwargs:
            given = f"this test's virtual_time marker gives limit={marker.kwargs['limit']!r}"
        else:
            limit = _test_limit(item, st)
            given = "no limit" if limit is None else f"{limit!r} virtual seconds"
            given = f"each loop it makes or configures may pass {given} in one test"
        _note_limit(call.excinfo.value, given)
    return (yield)


_LIMIT_NOTE = "pywheel.testing's pytest plugin: "


def _note_limit(exc: BaseException, given: str, depth: int = 0) -> None:
    from ._loop import TimeLimitError

    if isinstance(exc, BaseExceptionGroup) and depth < 8:  # anyio's task groups
        for inner in exc.exceptions:
            _note_limit(inner, given, depth + 1)
        return
    if not isinstance(exc, TimeLimitError) or any(
        isinstance(n, str) and n.startswith(_LIMIT_NOTE) for n in getattr(exc, "__notes__", ())
    ):
        return
    exc.add_note(
        f"{_LIMIT_NOTE}{given} (default {DEFAULT_LIMIT:g} s); change it with "
        f"--virtual-time-limit=SECONDS|none, "
        f"the virtual_time_limit ini option or @pytest.mark.virtual_time_limit(SECONDS) "
        f"(the virtual_time marker: limit=)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """--timing-fuzz / --timing-replay: run an async test (setup, call,
    teardown: function-scoped fixtures, pytest-asyncio's loop among them, are
    made afresh each run; a loop of a wider scope is lent the run's Timing)
    punctually, then under drawn schedules until one fails; log one run: the
    failing one, or else the punctual one."""
    st = item.config.stash.get(_SETTINGS, None)
    if st is None or not (st.fuzz or st.replay is not None) or not _session.is_async_test(item):
        return None

    if st.replay is not None:
        schedules = [st.replay]
    else:
        schedules = [None] + _session.schedules(
            st.bounds, st.seed, item.nodeid, st.fuzz, item.config.stash.get(_ESCALATE, None)
        )
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    shown = None
    for k, schedule in enumerate(schedules):
        _per_run_timeout(item, _run_name(k, len(schedules) - 1, schedule, st))
        ctx, reports = _run_schedule(item, nextitem, st, schedule)
        unperturbed = schedule is not None and not ctx.ran and _no_loop_ran(item, reports, k, st)
        failed = any(r.failed for r in reports)
        if shown is None or failed:
            shown = reports
        if failed:
            if schedule is not None and not unperturbed:
                found = (ctx, reports, schedule)
                if st.minimize > 0 and ctx.failure is not None:
                    ctx, reports, shrunk = _minimize(item, nextitem, st, ctx, reports, schedule)
                    shown = reports
                else:
                    shrunk = None
                _describe(item, reports, ctx, schedule, k, len(schedules) - 1, st, found, shrunk)
                _report_race(item, nextitem, st, [t for _, t, _ in ctx.timed], reports)
            break
        if any(r.skipped for r in reports):
            break  # skipped (or xfailed): the same again under a Timing tells nothing
    for report in shown:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


# ---- pytest-timeout -------------------------------------------------------
#
# pytest-timeout times the whole runtest protocol of a test (or its call
# alone, with func_only), and a fuzzed test runs it N+1 times inside that
# one protocol: one budget covered every run, so a test that takes 1 s
# under --timeout=5 timed out at its sixth fuzz run.  What a user expects is
# the budget of the test as it is without the fuzz: each run (its setup,
# call and teardown) gets the whole budget, as each rerun of
# pytest-rerunfailures does; a run that hangs still times out, naming its
# run.  So before each run the timer is set afresh, through pytest-timeout's
# own hooks (both methods, signal and thread).  A rerun of the fuzz (a
# replay, a minimization) is a run like any other: its own budget.  With
# func_only each call is timed already, and without pytest-timeout nothing
# changes.

_RUN = pytest.StashKey[str]()


def _run_name(k: int, n: int, schedule, st: _Settings) -> str:
    """'timing-fuzz run 3 of 100 (--timing-replay=TOKEN)'."""
    if schedule is None:
        return f"timing-fuzz run 0 of {n} (punctual)"
    what = "the --timing-replay run" if st.replay is not None else f"timing-fuzz run {k} of {n}"
    return f"{what} (--timing-replay={schedule.token})"


def _per_run_timeout(item: pytest.Item, run: str) -> None:
    """Gives one run of ``item`` (named ``run``, for the thread method's
    dump) pytest-timeout's whole budget, if it is installed and on for this
    test.  Call it before each run of a test's protocol (a rerun to
    minimize a failure too)."""
    plugin = item.config.pluginmanager.get_plugin("timeout")
    settings_of = getattr(plugin, "_get_item_settings", None)
    if settings_of is None:
        return
    try:
        settings = settings_of(item)
    except Exception:  # a bad timeout marker: pytest-timeout's own hooks say so
        return
    if not settings.timeout or settings.timeout <= 0 or settings.func_only:
        return
    item.stash[_RUN] = run
    _name_thread_timeouts(plugin)
    hook = item.config.hook
    hook.pytest_timeout_cancel_timer(item=item)
    hook.pytest_timeout_set_timer(item=item, settings=settings)


def _name_thread_timeouts(plugin) -> None:
    """pytest-timeout's thread method ends the process from its timer
    thread, printing stacks, before any report: it first says which fuzz
    run timed out (the signal method's timeout fails the run, whose report
    says it).  Wraps its module's ``timeout_timer``, once."""
    original = getattr(plugin, "timeout_timer", None)
    if original is None or getattr(original, "_pywheel_named", False):
        return

    def timeout_timer(item, settings):
        run = item.stash.get(_RUN, None)
        if run is not None:
            try:
                item.config.get_terminal_writer().line(
                    f"pywheel.testing: {item.nodeid} timed out in {run}"
                )
            except Exception:  # the timeout must happen whatever the line does
                pass
        return original(item, settings)

    timeout_timer._pywheel_named = True  # type: ignore[attr-defined]
    plugin.timeout_timer = timeout_timer


def _run_schedule(item, nextitem, st, schedule, *, traced: bool = False):
    """One run of the test (setup, call, teardown) whose loops take their
    Timings from ``schedule`` (None: punctual): (context, reports).  With
    ``traced``, each loop records a testing.Trace into ``ctx.traces``."""
    from _pytest.runner import runtestprotocol

    ctx = _context(item, st, schedule)
    if traced:
        ctx.traces = []
    saved = _session.enter(ctx)
    try:
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
    finally:
        try:
            ctx.end()
        finally:
            _session.current = saved
    ctx.end_times = ctx.virtual_times()
    return ctx, reports


def _rerun(item, nextitem, st, timings, bounds=None, *, traced: bool = False):
    """Runs the test once more, unlogged, its loops taking ``timings`` in
    the order they take Timings (Timing objects, or scripts: (kind, index)
    -> seconds; a loop past them runs punctually): (failed, context,
    reports).  ``bounds`` (max_late, max_cost, max_jitter) default to the
    first Timing's, else the session's.  ``traced``: see _run_schedule."""
    if bounds is None:
        first = next((t for t in timings if isinstance(t, Timing)), None)
        bounds = first._bounds() if first is not None else st.bounds
    _per_run_timeout(item, "a rerun of the failing run (to minimize or trace it)")
    schedule = _session.Scripted(bounds, timings)
    ctx, reports = _run_schedule(item, nextitem, st, schedule, traced=traced)
    return any(r.failed for r in reports), ctx, reports


class _Shrunk:
    """What minimizing a failing run did, for the report."""

    __slots__ = ("before", "after", "seconds", "reruns", "reproduced", "out_of_time")


def _minimize(item, nextitem, st, ctx, reports, schedule):
    """Minimizes a failing run: each loop's Timing in turn, the other loops
    replaying their decisions, with ``Timing.minimize`` (rerunning the
    test), within ``st.minimize`` real seconds in all.  A rerun counts as
    failing only if it fails the same way (the same phase, the same
    exception type): a smaller Timing that breaks the test differently
    tells another story, so it is not taken (the assertion shown is the
    one the minimized run raised).  Returns (context, reports, _Shrunk) of
    the last rerun that failed that way, or the original run's if none
    did (its decisions did not fail again)."""
    import time

    timings = [t for _, t, _ in ctx.timed]
    bounds = (schedule.max_late, schedule.max_cost, schedule.max_jitter)
    scripts = [t._in_order() for t in timings]
    info = _Shrunk()
    info.before = sum(len(s) for s in scripts)
    info.reruns = 0
    info.out_of_time = False
    started = time.monotonic()
    deadline = started + st.minimize
    last = None  # (ctx, reports) of the latest rerun that failed the same way

    def run(trial: list) -> bool:
        nonlocal last
        info.reruns += 1
        failed, c, reps = _rerun(item, nextitem, st, trial, bounds)
        if failed and c.failure is not None and _same_failure(c.failure, ctx.failure):
            last = (c, reps)
            return True
        return False

    for j in range(len(scripts)):
        left = deadline - time.monotonic()
        if left <= 0:
            info.out_of_time = True
            break
        if not scripts[j] and last is not None:
            continue

        def fails(t: Timing, j=j, scripts=scripts) -> bool:
            trial: list = list(scripts)
            trial[j] = t
            return run(trial)

        start = Timing(max_late=bounds[0], max_cost=bounds[1], max_jitter=bounds[2])
        start._script = dict(scripts[j])
        start.minimize(fails, rounds=20, seconds=left)
        if last is None:
            break  # its own decisions did not fail again: nothing to minimize
        scripts = [t._in_order() for _, t, _ in last[0].timed]
    info.seconds = time.monotonic() - started
    if time.monotonic() >= deadline:
        info.out_of_time = True
    info.reproduced = last is not None
    if last is None:
        info.after = info.before
        return ctx, reports, info
    c, reps = last
    info.after = sum(len(t.decisions) for _, t, _ in c.timed)
    return c, reps, info


def _same_failure(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and a[1] is b[1]


def _no_loop_ran(item, reports, k, st) -> bool:
    """A fuzz run in which no VirtualEventLoop ran perturbed nothing: its
    pass would be a lie, so its call fails, saying why (True if it did)."""
    call = next((r for r in reports if r.when == "call"), None)
    if call is None or not call.passed:
        return False  # it failed, or never ran: that is what to report
    what = (
        f"--timing-replay={st.replay.token}" if st.replay is not None else f"--timing-fuzz run {k}"
    )
    call.outcome = "failed"
    call.longrepr = (
        f"pywheel.testing: {what} perturbed nothing: no pywheel.testing VirtualEventLoop "
        f"ran while the test ran, so no Timing could reach the loop the test runs on. "
        f"It runs on a loop --virtual-time does not make: a loop_factory or event loop "
        f"policy of the suite's own (uvloop, a stock loop), another async library (anyio's "
        f"trio backend), or a loop already running on another thread. A test the fuzz "
        f"cannot perturb is an error, not a pass: run it on virtual time (docs/howto/"
        f"real-suites.md: 'A run that perturbed nothing is an error'), or deselect it "
        f"under --timing-fuzz."
    )
    return True


def _describe(item, reports, ctx, schedule, k, n, st, found=None, shrunk=None) -> None:
    ends = ctx.end_times if ctx.end_times is not None else ctx.virtual_times()
    times = ", ".join(f"t={t!r}" for t in ends) or (
        "(its loops are gone)" if ctx.made_any() else "no loop was made"
    )
    lines = [
        (
            f"replaying --timing-replay={schedule.token}"
            if st.replay is not None
            else f"failed on timing-fuzz run {k} of {n} (run 0, punctual, passed)"
        )
    ]
    if isinstance(schedule, _session.Rung):
        lines.insert(1, schedule.describe())
    token = schedule.token
    if shrunk is not None:
        lines.append(_shrunk_line(shrunk, found[0].failure))
        if shrunk.reproduced:
            token = _session.Scripted(
                (schedule.max_late, schedule.max_cost, schedule.max_jitter),
                [t for _, t, _ in ctx.timed],
            ).token
    lines.append(f"virtual time at the end of each loop of the run: {times}")
    for i, (_, timing, lent) in enumerate(ctx.timed):
        shared = " (a loop made before the test, lent this Timing while it ran)" if lent else ""
        lines.append(f"loop {i}{shared}: {timing!r}")
    if ctx.lent():
        lines.append(
            "the test ran on a loop it shares with other tests or runs (module or session "
            "scope): the replay reruns this schedule on a fresh one, which reproduces the "
            "failure unless it depends on what earlier tests or runs left on that loop (its "
            "virtual time, timers or tasks still pending)"
        )
    lines.append(f"replay: {_replay_command(item, token)}")
    if token != schedule.token:
        lines.append(f"the run as found, before minimizing: --timing-replay={schedule.token}")
    text = "\n".join(lines)
    for r in reports:
        if r.failed:
            r.sections.append(("pywheel.testing timing fuzz", text))


# ---- the picture of the race ---------------------------------------------------
#
# Only after a failure, two more runs of the test, each loop recording a
# testing.Trace: the punctual run and the failing run's Timings replayed.
# Nothing is recorded while the fuzz runs (a trace costs each event a few
# microseconds, and most runs pass).


def _trace_dir(config: pytest.Config) -> str | None:
    where = config.getoption("timing_trace", None)
    if where is None:
        where = config.getini("timing_trace") or None
    return where


def _trace_failure(item, nextitem, st, failing_timings) -> tuple[str, list[str]]:
    """Reruns the test punctually and under ``failing_timings`` (the failing
    run's Timings, one per loop, in the order its loops took them), each
    loop traced; returns the text timeline of the loop where the runs part,
    and the paths written under --timing-trace=DIR (Perfetto JSON, SVG)."""
    from ._draw import draw_race
    from ._trace import divergence, race_timeline

    _per_run_timeout(item, "the punctual run, traced (the race's reference)")
    ctx, reports = _run_schedule(item, nextitem, st, None, traced=True)
    passed_failed, punctual = any(r.failed for r in reports), ctx.traces
    failed, ctx, _ = _rerun(item, nextitem, st, failing_timings, traced=True)
    failing = ctx.traces
    notes = []
    if passed_failed:
        notes.append("(the punctual rerun failed too: the comparison below may not be the race)")
    if not failed:
        notes.append("(the traced rerun of the failing Timings passed: it did not reproduce)")
    if not punctual or not failing:
        return "no loop was traced in the reruns", []
    pairs = list(zip(punctual, failing, strict=False))
    k = next((i for i, (p, f) in enumerate(pairs) if divergence(p, f) is not None), 0)
    p, f = pairs[k]
    p.label, f.label = f"punctual run, loop {k}", f"failing run, loop {k}"
    head = f"loop {k} of {len(failing)}: " if len(failing) > 1 else ""
    text = "\n".join(notes + [head + race_timeline(p, f)])
    paths: list[str] = []
    where = _trace_dir(item.config)
    if where:
        os.makedirs(where, exist_ok=True)
        name = "".join(c if c.isalnum() or c in "._-" else "_" for c in item.nodeid)[:150]
        base = os.path.join(where, name)
        paths.append(f.write_perfetto(base + ".perfetto.json", p))
        draw_race(p, f, base + ".svg", title=f"{item.nodeid}: the race")
        paths.append(base + ".svg")
    return text, paths


def _report_race(item, nextitem, st, failing_timings, reports) -> None:
    """The failure's report gets the text timeline (and the files' paths)."""
    try:
        text, paths = _trace_failure(item, nextitem, st, failing_timings)
    except Exception as exc:  # the picture must never hide the failure
        text, paths = f"no trace: {type(exc).__name__}: {exc}", []
    for path in paths:
        text += f"\nwritten: {path}"
    if not paths and _trace_dir(item.config) is None:
        text += "\n(--timing-trace=DIR writes this race as a Perfetto trace and an SVG picture)"
    for r in reports:
        if r.failed:
            r.sections.append(("pywheel.testing race", text))


def _shrunk_line(shrunk: _Shrunk, failure) -> str:
    took = f"in {shrunk.seconds:.1f} s ({shrunk.reruns} reruns)"
    if not shrunk.reproduced:
        return (
            f"not minimized: its {shrunk.before} decisions, replayed, did not fail the same "
            f"way again ({shrunk.reruns} rerun{'s' if shrunk.reruns != 1 else ''}): "
            f"the failure depends on more than this test's Timings; the run as found is shown"
        )
    what = "decision" if shrunk.before == 1 else "decisions"
    if shrunk.after < shrunk.before:
        line = f"{shrunk.before} {what}, minimized to {shrunk.after} {took}"
    else:
        line = f"{shrunk.before} {what}, none of them could go {took}"
    if shrunk.out_of_time:
        line += "; its time ran out (--timing-minimize=SECONDS gives more; 0: off)"
    return line + f"; shown: the minimized run (it fails with {failure[1].__name__} too)"


# ---- the replay line ---------------------------------------------------------
#
# It is the command as it was given, so that what the project passes on the
# command line (-o asyncio_mode=auto, -p, -c, --rootdir, -W ...) is there
# again: pasted into a shell from the same directory, in the same
# environment, it reruns the failure.  From the given arguments it drops
# the fuzz's own options (--timing-*, --virtual-time, which it gives again)
# and the positional ones (the paths the session ran: the replay names the
# one test instead), telling options' values from positional arguments with
# pytest's own argument parser.  What the ini file's addopts and
# PYTEST_ADDOPTS give is not on the line: the same directory and shell give
# them again.  Rejected: rebuilding the line from the parsed options (every
# plugin's defaults would be spelled out, and options a plugin adds under
# another spelling could not be written back).

_FUZZ_DESTS = frozenset(
    {
        "timing_fuzz",
        "timing_max_late",
        "timing_max_cost",
        "timing_max_jitter",
        "timing_seed",
        "timing_escalate",
        "timing_replay",
        "timing_trace",
        "timing_minimize",
        "virtual_time",
    }
)


def _replay_command(item: pytest.Item, token: str) -> str:
    config = item.config
    words = _command_words(config) + _kept_args(config)
    words += [_node_arg(item), "--virtual-time", f"--timing-replay={token}"]
    return " ".join(shlex.quote(w) for w in words)


def _on_path(path: str) -> str:
    """``path``'s file name if the shell finds that very file under it."""
    name = os.path.basename(path)
    found = shutil.which(name)
    try:
        if found is not None and os.path.samefile(found, path):
            return name
    except OSError:
        pass
    return path


def _command_words(config: pytest.Config) -> list[str]:
    """How pytest was started: ``python -m pytest`` (with this interpreter:
    ``-m`` also puts the directory on sys.path, which a plain ``pytest``
    does not), the ``pytest`` script, or, for ``pytest.main()`` called by a
    program, ``pytest``."""
    argv0 = sys.argv[0] if sys.argv else ""
    base = os.path.basename(argv0)
    if base == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "pytest":
        return [_on_path(sys.executable), "-m", "pytest"]
    if base.startswith(("pytest", "py.test")) and os.path.isfile(argv0):
        return [_on_path(argv0)]
    return ["pytest"]


def _actions(config: pytest.Config) -> dict:
    parser = config._parser  # pytest keeps no public handle on it
    optparser = getattr(parser, "optparser", None)
    if optparser is None:  # pytest < 9 builds it on demand
        optparser = parser._getparser()
    return optparser._option_string_actions


def _kept_args(config: pytest.Config) -> list[str]:
    """The given arguments minus the fuzz's own options and the positional
    arguments."""
    raw = [str(a) for a in config.invocation_params.args]
    try:
        actions = _actions(config)
    except Exception:  # pytest changed its insides: keep what is surely an option
        actions = None
    kept: list[str] = []
    i = 0
    while i < len(raw):
        arg = raw[i]
        if arg == "--":
            break  # the rest is positional
        if not arg.startswith("-") or arg == "-":
            if arg.startswith("@"):
                kept.append(arg)  # a file of arguments (argparse's fromfile)
            i += 1
            continue
        group, dest = _option_group(raw, i, actions)
        if dest not in _FUZZ_DESTS:
            kept += group
        i += len(group)
    return kept


def _option_group(raw: list[str], i: int, actions) -> tuple[list[str], str | None]:
    """The option at ``raw[i]`` with the values it takes, and its dest."""
    arg = raw[i]
    if actions is None:
        return [arg], None
    if arg.startswith("--"):
        name, eq, _ = arg.partition("=")
        action = actions.get(name)
        takes = 0 if eq or action is None else _values(action, raw, i + 1)
        return raw[i : i + 1 + takes], getattr(action, "dest", None)
    # Short options, possibly bundled (-vx) or with the value attached (-kfoo).
    pos = 1
    while pos < len(arg):
        action = actions.get("-" + arg[pos])
        if action is None:
            return [arg], None
        if _values(action, raw, i + 1) or action.nargs == "?":
            if pos + 1 < len(arg):  # the value is the rest of this word
                return [arg], action.dest
            takes = _values(action, raw, i + 1)
            return raw[i : i + 1 + takes], action.dest
        pos += 1
    return [arg], getattr(action, "dest", None)


def _values(action, raw: list[str], j: int) -> int:
    """How many of the words from ``raw[j]`` on an option's action takes:
    store and append take one (nargs None), store_true, count, help and
    store_const none (nargs 0)."""
    nargs = action.nargs
    if nargs is None:
        return 1
    if nargs == "?":
        return 1 if j < len(raw) and not raw[j].startswith("-") else 0
    if nargs in ("*", "+"):
        n = 0
        while j + n < len(raw) and not raw[j + n].startswith("-"):
            n += 1
        return n
    return nargs if isinstance(nargs, int) else 0


def _node_arg(item: pytest.Item) -> str:
    """The test's node id as an argument given from the directory pytest was
    started in (a node id is relative to rootdir, which -c, --rootdir or an
    ini file elsewhere can move)."""
    nodeid = item.nodeid
    path = getattr(item, "path", None)
    _, sep, rest = nodeid.partition("::")
    if path is None or not sep:
        return nodeid
    try:
        where = os.path.relpath(str(path), str(item.config.invocation_params.dir))
    except ValueError:  # another drive (Windows)
        where = str(path)
    return f"{where}::{rest}"


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
        # The test's limit and a fuzz run's Timing reach the marker's and
        # the fixture's loops too (the marker's own limit= wins).
        for name, value in ctx.kwargs().items():
            if name != "clocks":
                kwargs.setdefault(name, value)
    return kwargs


def _made(loop, item) -> None:
    marker = item.get_closest_marker("virtual_time")
    if marker is None or "limit" not in marker.kwargs:
        _session.limited(loop)  # the plugin's limit: renewed for each test
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
    _made(loop, request.node)
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
        _made(loop, pyfuncitem)
        try:
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                runner.run(coro)
        finally:
            if not loop.is_closed():
                loop.close()
    return True
