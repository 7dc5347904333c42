"""Where a suite's garbage collection time goes, in real time (h20g).

    PYTHONPATH=benchmarks/suite_plugins GC_PROBE_OUT=/tmp/gc.jsonl \\
        <suite venv>/bin/python -m pytest -p gc_probe ...

Wraps ``gc.collect`` (what aiohttp's ``loop`` fixture calls after every test
unless ``--aiohttp-fast``) and writes one JSON line per call: its real and
CPU seconds (``clock_gettime(CLOCK_MONOTONIC)`` and ``thread_time()``, which
``--virtual-time`` leaves real), the tracked objects per generation before it
and what it freed; one line per test (real and CPU seconds, the automatic
collections and their real time); and at the tests numbered in
``GC_PROBE_SNAP`` (default ``50,400``) a histogram of the heap by type after a
full collection.  ``GC_PROBE_SECOND=1`` times a second collection right after
each (nothing left to free: the cost of traversing the heap alone);
``GC_PROBE_FREEZE=1`` calls ``gc.freeze()`` at session start (to measure what
freezing the start-up heap would save; pywheel does not do it).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import time

_clock = time.clock_gettime
_MONO = time.CLOCK_MONOTONIC
_cpu = time.thread_time
_collect = gc.collect
_snap = {int(x) for x in os.environ.get("GC_PROBE_SNAP", "50,400").split(",") if x}
_out = open(os.environ.get("GC_PROBE_OUT", "gc_probe.jsonl"), "w")  # noqa: SIM115
_state: dict = {"test": 0, "id": None, "explicit": False, "t0": 0.0, "c0": 0.0, "start": 0.0}
_auto: collections.Counter = collections.Counter()
_auto_time: collections.Counter = collections.Counter()


def _write(rec: dict) -> None:
    _out.write(json.dumps(rec) + "\n")


def _callback(phase: str, info: dict) -> None:
    if _state["explicit"]:
        return
    if phase == "start":
        _state["start"] = _clock(_MONO)
    else:
        _auto[info["generation"]] += 1
        _auto_time[info["generation"]] += _clock(_MONO) - _state["start"]


def collect(*args, **kwargs):
    gens = [len(gc.get_objects(generation=i)) for i in range(3)]
    c0, t0 = _cpu(), _clock(_MONO)
    _state["explicit"] = True
    try:
        freed = _collect(*args, **kwargs)
        t1, c1 = _clock(_MONO), _cpu()
        second = None
        if os.environ.get("GC_PROBE_SECOND"):
            _collect()
            second = _cpu() - c1
    finally:
        _state["explicit"] = False
    _write({"k": "collect", "test": _state["test"], "id": _state["id"], "real": t1 - t0,
            "cpu": c1 - c0, "second_cpu": second, "gens": gens, "freed": freed,
            "frozen": gc.get_freeze_count()})  # fmt: skip
    return freed


def pytest_configure(config) -> None:
    gc.callbacks.append(_callback)
    gc.collect = collect


def pytest_sessionstart(session) -> None:
    if os.environ.get("GC_PROBE_FREEZE"):
        _collect()
        gc.freeze()


def pytest_runtest_setup(item) -> None:
    _state["test"] += 1
    _state["id"] = item.nodeid
    _state["t0"], _state["c0"] = _clock(_MONO), _cpu()


def pytest_runtest_logfinish(nodeid, location) -> None:
    _write({"k": "test", "test": _state["test"], "id": nodeid,
            "real": _clock(_MONO) - _state["t0"], "cpu": _cpu() - _state["c0"],
            "auto": dict(_auto), "auto_real": dict(_auto_time)})  # fmt: skip
    _auto.clear()
    _auto_time.clear()
    if _state["test"] in _snap:
        _collect()
        hist: collections.Counter = collections.Counter()
        for obj in gc.get_objects():
            t = type(obj)
            hist[f"{t.__module__}.{t.__qualname__}"] += 1
        _write({"k": "heap", "test": _state["test"], "total": sum(hist.values()),
                "types": dict(hist)})  # fmt: skip
    _out.flush()


def pytest_unconfigure(config) -> None:
    gc.collect = _collect
    if _callback in gc.callbacks:
        gc.callbacks.remove(_callback)
    _out.close()
