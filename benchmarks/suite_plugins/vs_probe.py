"""A pytest plugin the real-suite benchmark loads with ``-p vs_probe`` (this
folder on PYTHONPATH); it changes nothing in the suite under test.

- ``VS_PROBE_COUNT=<file>``: counts the ``pywheel.testing.VirtualEventLoop``
  and ``timeless_loop.TimelessEventLoop`` objects made in this process and
  appends ``<class> <count>`` to the file at exit: the proof that a run on
  virtual time (or timeless_loop) really ran on it;
- ``VS_PROBE_TIMELESS=1``: timeless_loop applied the way its README says,
  ``asyncio.set_event_loop_policy(TimelessEventLoopPolicy())``, before any
  test runs (the suite's own conftest is not touched, as for the others).
"""

import asyncio
import os

_counts: dict[str, int] = {}


def _count(cls) -> None:
    init = cls.__init__
    name = cls.__name__

    def counting_init(self, *args, **kwargs):
        _counts[name] = _counts.get(name, 0) + 1
        init(self, *args, **kwargs)

    cls.__init__ = counting_init


def pytest_configure(config):
    if os.environ.get("VS_PROBE_COUNT"):
        try:
            from pywheel.testing import VirtualEventLoop

            _count(VirtualEventLoop)
        except ImportError:
            pass
        try:
            from timeless_loop import TimelessEventLoop

            _count(TimelessEventLoop)
        except ImportError:
            pass
    if os.environ.get("VS_PROBE_TIMELESS") == "1":
        from timeless_loop import TimelessEventLoopPolicy

        asyncio.set_event_loop_policy(TimelessEventLoopPolicy())


def pytest_unconfigure(config):
    path = os.environ.get("VS_PROBE_COUNT")
    if path:
        with open(path, "a") as f:
            for name, n in sorted(_counts.items()):
                f.write(f"{name} {n}\n")
