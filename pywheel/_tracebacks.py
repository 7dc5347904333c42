"""pytest's ``__tracebackhide__`` for pywheel's own modules.

A module that does ``from pywheel._tracebacks import hide as
__tracebackhide__`` has its frames left out of pytest's report of a failing
test (pytest reads the name from a frame's globals, and calls it with the
failure), so that report starts and ends in the user's code: a virtual-time
test that deadlocked printed about seventy lines of the loop's insides first.
``pytest --full-trace`` (and ``--tb=native``) still show every frame.

Why this and not a hook that prunes every frame under ``pywheel/``: pytest
asks ``__tracebackhide__`` wherever it prints a traceback (a test's call, a
fixture's setup or teardown, any plugin that runs the test: pytest-asyncio,
anyio), through its one public seam; a hook would have to reach into the
report after pytest built it.

Not hidden: a failure whose exception pywheel's own code raised and never
raises on purpose (an ``AttributeError`` in the loop is a bug of pywheel's,
and then its frames are the story).  Nothing here imports anything of
pywheel's: it is imported by ``pywheel.asyncio`` as well as by
``pywheel.testing``.
"""

from __future__ import annotations

import asyncio
import os

_PYWHEEL = os.path.dirname(os.path.abspath(__file__)) + os.sep

#: What pywheel's code raises on purpose: its own errors (VirtualTimeError is
#: a RuntimeError), refused arguments, a timeout, and what passes through any
#: code (cancellation, interrupts, a failed allocation).
_ON_PURPOSE = (
    RuntimeError,
    TypeError,
    ValueError,
    OverflowError,
    TimeoutError,
    MemoryError,
    asyncio.CancelledError,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)


def hide(excinfo=None) -> bool:
    """True: leave this frame out of pytest's report of ``excinfo``."""
    tb = getattr(excinfo, "tb", None)
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    if not tb.tb_frame.f_code.co_filename.startswith(_PYWHEEL):
        return True  # it was raised in the user's code (or asyncio's)
    return isinstance(excinfo.value, _ON_PURPOSE)
