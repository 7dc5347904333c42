"""Minimized by default, the hypothesis side: the first failure found with
a Timing of ``timings()`` is minimized with ``Timing.minimize``, then
hypothesis runs the test again from scratch with the strategy playing the
minimized decisions (drawing nothing), and reports that run.

Why not leave it to hypothesis's shrinker.  A Timing is one draw per
decision of the run, and removing one perturbation moves every later
event, so the shrinker's moves mostly make runs that pass or draw
differently: on the TTL cache of ``tests/test_timing_hypothesis_minimize.py``
it shrank for 84 s and left about 100 decisions (the issue saw 36-99 s,
1,007 shrinks, 388 invalid); ``Timing.minimize`` knows what a decision is
(groups zeroed and shifted to their new places, merged, halved) and gets to
the one that matters in a fraction of a second.

How, without fighting hypothesis.  Hypothesis requires an example's draws
to be a function of its choices (its data tree raises "inconsistent data
generation" otherwise), and a Timing draws lazily, inside the test: a
strategy that switched to playing a script in the middle of a run would
draw differently for choices hypothesis has already seen.  So the first
failing call that has exactly one recorded Timing of ``timings()`` among
its arguments is minimized there (the test rerun with a scripted Timing in
its place; a rerun counts as failing only with the same exception type),
the script is handed to the strategy, and the call raises ``Minimized`` (a
BaseException: hypothesis lets it through, and its run ends).  The caller
(the pytest plugin's ``pytest_runtest_call``, the corpus runner) calls the
test again: a fresh hypothesis run, a fresh data tree, every Timing the
strategy makes plays the minimized decisions and ``note()``\\s them, so the
shrinker works only on the other arguments and its report shows the
minimized Timing.  If that second run passes (the failure does not
reproduce), the first failure is raised as it was.  Rejected: a custom
shrink order (hypothesis exposes none); minimizing after hypothesis shrank
(the long shrink is the cost to avoid).

The catch: the example database gets the second run's example, in which
the Timing drew nothing: a later session replays it punctually, and the
generation phase finds the failure again.  The note gives the minimized
Timing's token (``Timing.from_token``) for a rerun by hand.

Outside pytest nothing wraps a test, and hypothesis shrinks as it always
did (``timing.minimize`` by hand, docs/explanation/timing-fuzz.md)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ._timing import Timing

#: Real seconds a failing --timing-fuzz run (or hypothesis failure) may be minimized for, when
#: nothing says otherwise.  Ten: the longest a user waits for a report
#: without wondering whether the run hung, and what the real-bug corpus
#: needs (examples/real_bugs/README.md: each of its bugs minimized well
#: within it).  The budget ends a pass of Timing.minimize() where it is; a
#: rerun under way finishes.
DEFAULT_MINIMIZE = 10.0


class Minimized(BaseException):
    """Raised through hypothesis once a failure was minimized: the caller
    runs the test again (``again``).  ``original``: the failure as found."""

    def __init__(self, original: BaseException, text: str) -> None:
        super().__init__(text)
        self.original = original


class Minimizing:
    """``inner`` (a hypothesis test's ``inner_test``) wrapped: see the
    module.  ``reset()`` forgets the script it handed to a strategy (the
    test's run is over: a strategy shared with another test draws again)."""

    def __init__(self, inner: Callable, seconds: float) -> None:
        self.inner = inner
        self.seconds = seconds
        self.states: list[dict] = []
        #: (decisions before, after, seconds, reruns) of the minimization done.
        self.done: tuple[int, int, float, int] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # pytest: the report starts in the test
        try:
            return self.inner(*args, **kwargs)
        except Exception as exc:
            if self.seconds > 0 and self.done is None:
                text = self._minimize(args, kwargs, exc)
                if text is not None:
                    raise Minimized(exc, text) from exc
            raise

    def reset(self) -> None:
        for state in self.states:
            state["script"] = None
            state["note"] = None
        self.states.clear()

    def _minimize(self, args: tuple, kwargs: dict, exc: Exception) -> str | None:
        from hypothesis.errors import HypothesisException
        from hypothesis.strategies import DataObject

        if isinstance(exc, HypothesisException):
            return None  # assume(), an invalid example: not a failure
        values = list(args) + list(kwargs.values())
        if any(isinstance(v, DataObject) for v in values):
            return None  # a rerun would draw from the example's data again
        found = [
            v
            for v in values
            if isinstance(v, Timing)
            and v._source is not None
            and v._source.get("script") is None
            and v._state == "recorded"
            and v._notes
        ]
        if len(found) != 1:
            return None  # none, or two: which one matters is not ours to guess
        timing = found[0]
        kind = type(exc)
        reruns = 0

        def fails(t: Timing) -> bool:
            nonlocal reruns
            reruns += 1
            new_args = [t if a is timing else a for a in args]
            new_kwargs = {k: (t if v is timing else v) for k, v in kwargs.items()}
            try:
                self.inner(*new_args, **new_kwargs)
            except Exception as e:
                return type(e) is kind
            return False

        started = time.monotonic()
        best = timing.minimize(fails, rounds=20, seconds=self.seconds)
        took = time.monotonic() - started
        if best._state != "recorded":
            return None  # minimize() ran it whole and it passed: not reproducible
        before, after = len(timing._notes), len(best._notes)
        self.done = (before, after, took, reruns)
        state = timing._source
        state["script"] = best._in_order()
        state["note"] = (
            f"timing: pywheel minimized the first failing Timing from {before} decisions "
            f"to {after} in {took:.1f} s ({reruns} reruns); this run plays it in every "
            f"example (token {best.token}, for Timing.from_token)"
        )
        self.states.append(state)
        return state["note"]


def again(call: Callable[[], Any], done: Minimized) -> Any:
    """The second run, the Timing pinned to the minimized decisions:
    its failure (hypothesis's report) goes on; if it passes, the failure as
    found is raised, saying so."""
    call()
    exc = done.original
    exc.add_note(
        f"{done}; but a fresh hypothesis run under it passed: the failure as found is shown"
    )
    raise exc


def wrap(test: Any, seconds: float) -> Minimizing | None:
    """Wraps a ``@given`` test's ``inner_test`` (None if ``test`` is not
    one); the caller puts the original back and calls ``reset()``."""
    hyp = getattr(test, "hypothesis", None)
    inner = getattr(hyp, "inner_test", None)
    if inner is None or hasattr(inner, "_pywheel_minimizing"):
        return None
    m = Minimizing(inner, seconds)

    # A function with the test's name and signature: hypothesis reads them
    # off inner_test to print the failing example.
    @functools.wraps(inner)
    def inner_test(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return m(*args, **kwargs)

    inner_test._pywheel_minimizing = m  # type: ignore[attr-defined]
    hyp.inner_test = inner_test
    return m


def unwrap(test: Any, m: Minimizing) -> None:
    test.hypothesis.inner_test = m.inner
    m.reset()
