"""Loaded at start-up by every Python process the parity harness runs in
"wheel" mode (this folder is put first on PYTHONPATH), including the
subprocesses a suite starts itself (pytester, multiprocessing).

PYWHEEL_PARITY_LOOP=wheel makes every loop made through asyncio's default
policy (asyncio.run, asyncio.Runner, asyncio.new_event_loop, the pytest
plugins) and every asyncio.SelectorEventLoop/EventLoop made by name a
WheelEventLoop.
PYWHEEL_PARITY_LOOP=uvloop and =pywheel-uvloop do the same with uvloop.Loop
and pywheel.uvloop.Loop (both through a subclass that takes, and ignores,
SelectorEventLoop's selector argument, so the two sides differ only in the
base class).
PYWHEEL_PARITY_LOOP=rloop and =pywheel-rloop: the same with rloop.RLoop and
pywheel.rloop.Loop.
Each process that made one appends "<pid> <count>" to the file named by
PYWHEEL_PARITY_COUNT at exit: the harness's proof that the swap happened.
"""

import os

_LOOP = os.environ.get("PYWHEEL_PARITY_LOOP")

if _LOOP in ("wheel", "uvloop", "pywheel-uvloop", "rloop", "pywheel-rloop"):
    import asyncio
    import atexit
    import warnings

    _made = [0]

    if _LOOP == "wheel":
        import pywheel.asyncio as _pwa

        _init = _pwa.WheelEventLoop.__init__

        def _counting_init(self, *args, **kwargs):
            _made[0] += 1
            _init(self, *args, **kwargs)

        _pwa.WheelEventLoop.__init__ = _counting_init
        _factory = _pwa.WheelEventLoop
    else:
        if _LOOP == "uvloop":
            from uvloop import Loop as _base
        elif _LOOP == "pywheel-uvloop":
            from pywheel.uvloop import Loop as _base
        elif _LOOP == "rloop":
            from rloop import RLoop as _base
        else:
            from pywheel.rloop import Loop as _base

        class _ParityLoop(_base):
            def __init__(self, selector=None):
                _made[0] += 1
                super().__init__()

        _factory = _ParityLoop

    # Every policy built on asyncio's default one (asyncio.run, Runner,
    # new_event_loop, the pytest plugins, suites' own subclasses) makes its
    # loops with _loop_factory; code that names the class gets ours too.
    with warnings.catch_warnings():  # 3.14+: the policy names are deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        _policy = getattr(asyncio, "DefaultEventLoopPolicy", None)
    if _policy is not None:  # gone where asyncio has no policies (3.16)
        _policy._loop_factory = _factory
    asyncio.SelectorEventLoop = _factory
    if hasattr(asyncio, "EventLoop"):  # 3.13's name for the default loop class
        asyncio.EventLoop = _factory

    def _report():
        path = os.environ.get("PYWHEEL_PARITY_COUNT")
        if path and _made[0]:
            with open(path, "a") as f:
                f.write(f"{os.getpid()} {_made[0]}\n")

    atexit.register(_report)
