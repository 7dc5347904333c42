"""pywheel: a C timing wheel on its own native thread.

    >>> import time, pywheel
    >>> with pywheel.Wheel() as wheel:   # leaving the block cancels what is pending
    ...     handle = wheel.call_later(0.05, print, "50 ms later")  # on the wheel's thread
    ...     time.sleep(0.1)
    50 ms later

A tutorial: docs/tutorials/idle-timeouts.md; the semantics, each with its
test: docs/explanation/guarantees.md.
"""

import atexit as _atexit
import os as _os

from ._core import ManualWheel, TimerHandle, Wheel
from ._version import __version__ as __version__

__all__ = ["ManualWheel", "TimerHandle", "Wheel"]

#: Seconds the interpreter waits at exit for callbacks still running on wheel
#: threads (every pending timer is cancelled first).  Past it the interpreter
#: exits anyway and the thread is stopped when it next asks for the GIL.
EXIT_GRACE = 5.0


def _shutdown() -> None:
    _core._shutdown(EXIT_GRACE)


from . import _core  # noqa: E402  (the hooks below need the module itself)

_atexit.register(_shutdown)
# The C extension holds its locks across fork() itself (pthread_atfork); this
# hook closes, in the child, the wheels whose threads stayed in the parent.
# Where there is no fork (Windows) there is no hook to register.
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_core._after_fork_child)
