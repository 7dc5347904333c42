"""A corpus of real timing bugs: each shipped in a released version of
widely used asyncio code and was fixed upstream.  One module per bug; each
has

- ``REF``: the upstream report and fix (repository, issue / PR);
- ``BUGGY`` and ``FIXED``: ``(python, requirement)`` -- the CPython version
  ("3.11") and the PyPI requirement ("aiorwlock==1.1.0", or None for a bug
  in CPython's own asyncio);
- ``on_stock()``: the bug on the stock asyncio loop, without pywheel (real
  time or a schedule injected by hand); raises AssertionError where the
  installed version has the bug;
- ``async def scenario()``: the library's documented promise as a user
  would test it, with round parameters; raises AssertionError when broken;
- ``installed()``: the version under test.

    python -m examples.real_bugs            # the scoreboard (see README.md)
"""

import platform
from importlib import metadata

BUGS = [
    "rwlock_two_writers",
    "anyio_lock_cancelled_waiter",
    "cpython_wait_for_swallows_cancel",
    "cpython_condition_lost_notify",
    "async_timeout_swallows_cancel",
    "anyio_condition_lost_notify",
    "anyio_lock_stranded_waiter",
    "anyio_semaphore_cancelled_waiter",
    "psycopg_pool_cancelled_getconn",
]

#: Examples per bug (derandomized), for the hunt and for the fixed version.
EXAMPLES = 300
#: Virtual seconds a scenario may run.
LIMIT = 3600


def __getattr__(name: str):
    # BOUNDS: the one set of timings() bounds the scoreboard uses for every
    # bug -- timings()'s documented defaults, chosen on this corpus (the
    # scoreboard calls timings() with no bound; this is the same mapping,
    # pywheel.testing._timing.DEFAULT_BOUNDS, for showing).  Looked up
    # lazily: the stock-loop checks import this package without pywheel.
    if name == "BOUNDS":
        from pywheel.testing._timing import DEFAULT_BOUNDS

        return DEFAULT_BOUNDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dist_version(dist: str) -> str:
    """'aiorwlock 1.1.0' (or 'CPython 3.12.1' for dist None)."""
    if dist is None:
        return f"CPython {platform.python_version()}"
    return f"{dist} {metadata.version(dist)}"


def meta(name: str) -> dict:
    """A bug module's REF, PROMISE, BUGGY and FIXED, read from its source
    without importing it (its library is installed only in its venvs)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).with_name(f"{name}.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in ("REF", "PROMISE", "BUGGY", "FIXED"):
                out[target.id] = ast.literal_eval(node.value)
    return out
