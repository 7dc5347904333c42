"""A pytest plugin ``benchmarks/fuzz_bounds.py --timers`` loads with ``-p
timer_probe`` (this folder on PYTHONPATH) in a punctual ``--virtual-time``
run; it changes nothing the suite sees.

``TIMER_PROBE_OUT=<file>``: per test, one JSON line with the delays (virtual
seconds, > 0) of every timer a VirtualEventLoop armed while the test ran
(``call_later`` and ``call_at``, asyncio's own sleeps and timeouts among
them): what a bound derived from "the timers the test arms" would read."""

import json
import os

_current: list = [None, []]


def pytest_configure(config):
    if not os.environ.get("TIMER_PROBE_OUT"):
        return
    from pywheel.testing import VirtualEventLoop

    later, at = VirtualEventLoop.call_later, VirtualEventLoop.call_at

    def call_later(self, delay, *args, **kwargs):
        if _current[0] is not None and delay > 0:
            _current[1].append(delay)
        return later(self, delay, *args, **kwargs)

    def call_at(self, when, *args, **kwargs):
        delay = when - self.time()
        if _current[0] is not None and delay > 0:
            _current[1].append(delay)
        return at(self, when, *args, **kwargs)

    VirtualEventLoop.call_later = call_later
    VirtualEventLoop.call_at = call_at


def pytest_runtest_setup(item):
    _current[0], _current[1] = item.nodeid, []


def pytest_runtest_logfinish(nodeid, location):
    out = os.environ.get("TIMER_PROBE_OUT")
    if out and _current[0] == nodeid:
        with open(out, "a") as f:
            f.write(json.dumps({"nodeid": nodeid, "delays": _current[1]}) + "\n")
        _current[0] = None
