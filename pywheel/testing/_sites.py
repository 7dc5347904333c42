"""Naming the events of a run, for people: where a task waits, which callback
or timer ran (``"task 'name' in func() at file.py:12"``, ``"Cache.expire()"``).

The loop names a deadlock's waiting tasks and a late wake-up's timer with
these; a Timing notes its non-zero decisions with the names the loop hands
it.  Nothing here knows the loop or the Timing (both import this, and it
imports neither): names hold no memory address, so the same run gives the
same words."""

from __future__ import annotations

import os
import re
from asyncio import tasks as _tasks

_DEFAULT_TASK_NAME = re.compile(r"Task-\d+")
_HERE = os.path.dirname(os.path.abspath(__file__))
_PYWHEEL = os.path.dirname(_HERE)
_ASYNCIO = os.path.dirname(os.path.abspath(_tasks.__file__))


class Site(str):
    """A name (a plain ``str`` to everyone else) that also says whether the
    event is asyncio's or pywheel's own (``internal``: no frame or callback
    of the program's), which a Timing's ``repr()`` folds away."""

    internal = False


def _site(text: str, internal: bool) -> str:
    site = Site(text)
    site.internal = internal
    return site


def _user_frame(frame) -> str:
    """'func() at file.py:12' for the innermost frame outside asyncio and pywheel."""
    while frame is not None:
        fn = frame.f_code.co_filename
        if not (fn.startswith(_ASYNCIO) or fn.startswith(_PYWHEEL)):
            return f"{frame.f_code.co_name}() at {os.path.basename(fn)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def task_site(task) -> str:
    """Where a task is suspended: "task 'name' in func() at file.py:12"."""
    coro = task.get_coro()
    where = None
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            break
        fn = frame.f_code.co_filename
        if not (fn.startswith(_ASYNCIO) or fn.startswith(_PYWHEEL)):
            where = f"{frame.f_code.co_name}() at {os.path.basename(fn)}:{frame.f_lineno}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    internal = False
    if where is None:
        code = getattr(task.get_coro(), "cr_code", None)
        where = f"{code.co_name}()" if code is not None else _type_name(task.get_coro())
        # No frame of the program's: asyncio's or pywheel's own task (a
        # shutdown_default_executor()), unless its coroutine is the
        # program's and has not started or has finished.
        internal = code is not None and code.co_filename.startswith((_ASYNCIO, _PYWHEEL))
    name = task.get_name()
    if _DEFAULT_TASK_NAME.fullmatch(name):  # a process-wide counter: not worth showing
        return _site(f"task in {where}", internal)
    return _site(f"task {name!r} in {where}", internal)


def callback_site(callback) -> str:
    """A task step or wake-up names its task; anything else its qualified name."""
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, _tasks.Task):
        return task_site(owner)
    func = getattr(callback, "func", None)  # functools.partial
    if func is not None:
        callback = func
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    if isinstance(name, str) and name:
        return _site(f"{name}()", internal_callback(callback))
    return _type_name(callback)  # a callable object: its class, never its address


def internal_code(code) -> bool:
    """Code of asyncio's or pywheel's own."""
    fn = code.co_filename
    return fn.startswith(_ASYNCIO) or fn.startswith(_PYWHEEL)


def internal_callback(callback) -> bool:
    """A callback written in Python inside asyncio or pywheel (a sleep's
    wake-up, asyncio.timeout's expiry): it only resolves a future or
    cancels a task, and the program's work is in the step it wakes."""
    func = getattr(callback, "func", callback)  # functools.partial
    func = getattr(func, "__func__", func)  # a bound method
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    fn = code.co_filename
    return fn.startswith(_ASYNCIO) or fn.startswith(_PYWHEEL)


def timer_site(callback, owner) -> str:
    """A timer's callback: asyncio's own (a sleep's or a timeout's) names the
    task that scheduled it, where there is one; any other names itself."""
    if isinstance(owner, _tasks.Task) and internal_callback(callback):
        return task_site(owner)
    return callback_site(callback)


def _type_name(obj) -> str:
    return f"<{type(obj).__qualname__} object>"
