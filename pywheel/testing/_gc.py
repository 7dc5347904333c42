"""The cyclic garbage collector during a perturbed run: off from the first
run of a loop given a ``timing=`` until that loop is closed.

Why: a Timing names each decision by its place in the run ("the 57th task
step"), so a replay must meet the same events in the same order.  Garbage
in a reference cycle is freed whenever the collector happens to run, and
that depends on allocations outside the program -- hypothesis's own between
examples, an earlier example's garbage, the test's setup.  What its
finalizers do then lands at that moment: an async generator left suspended
in a cycle (an ``async for`` broken out of, over a cursor that holds its
connection) has the loop's finalizer hook schedule its ``aclose()``, a task
and its steps that a replay meets elsewhere or not at all.  The same draws
then made runs of different lengths, and hypothesis stopped with
"inconsistent data" (``tests/test_timings_gc.py``; the real-bug corpus met
it on psycopg-pool).  With the collector off for the loop's whole life --
between its runs too: ``asyncio.Runner`` runs the program, then
``shutdown_asyncgens()`` -- such a generator is closed where the program's
own code decides: by ``shutdown_asyncgens()``, which still holds it, or by
an explicit ``gc.collect()``, which works as ever.  Objects that reference
counting frees go as they always do.

Rejected:

- a full ``gc.collect()`` before (or after) each run, so that no earlier
  garbage is left to land inside it: the heap hypothesis keeps while it
  explores is large, and one collection cost 34 ms (median) on the
  watchdog example's hunt, 26 of its 40 s (the corpus runner met the same);
  and the collector, still on during the run, would still free the run's
  own garbage wherever the allocations took it, and they are not the
  program's alone: each decision is drawn through hypothesis, whose code
  allocates differently when it generates, replays or shrinks.
- decisions asked for by work a finalizer scheduled not drawing: that work
  (a task's steps) runs from the ready queue like any other, long after
  the finalizer returned, and its place in the run still moves the
  decisions after it.

The cost: cyclic garbage a run makes stays until its loop is closed, and
the next collection after that frees it (a fuzzed run is one test's
program; one that makes cycles without end grows until it stops).
``gc.isenabled()`` is put back as it was when the first such loop started
running: re-enabled if it was on, left alone if it was off.  Several loops
open at once (threads, or loops closed late) keep it off until the last of
them is closed; a loop collected without ``close()`` is closed by
asyncio's ``__del__``, which releases it; a Timing drawn by ``timings()``
releases its loop at the end of the hypothesis example if the test left it
open."""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_holders = 0  # loops holding the collector off
_was_enabled = False  # gc.isenabled() when the first of them took it


def hold(loop) -> None:
    """``loop`` (not closed) is running under a Timing: collector off."""
    global _holders, _was_enabled
    if loop._gc_held:
        return
    # Nothing in the locked sections allocates a container: no collection
    # (and no __del__ that closes a loop and releases) can start inside.
    with _lock:
        if not _holders:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    loop._gc_held = True


def release(loop) -> None:
    """``loop`` was closed: the last loop to go puts the collector back."""
    global _holders
    if not loop._gc_held:
        return
    loop._gc_held = False
    with _lock:
        _holders -= 1
        if not _holders and _was_enabled:
            gc.enable()
