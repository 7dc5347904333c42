"""Context (docs/explanation/guarantees.md, "Context"): each callback runs in a
copy of the contextvars context current when it was scheduled, or in the
context= passed; what a callback sets does not leak to the caller or to other
callbacks, and a repeating timer uses its context for every run."""

import contextvars

import pytest
from helpers import settle, wait_for

from pywheel import ManualWheel

VAR = contextvars.ContextVar("pywheel_test_var")
LEAK = contextvars.ContextVar("pywheel_test_leak")


# ---------------------------------------------------------------------------
# contexts


def test_explicit_context_is_entered(anywheel):
    ctx = contextvars.Context()
    ctx.run(VAR.set, "explicit")
    seen = []

    def record(tag):
        seen.append((tag, VAR.get("unset")))

    def body():
        anywheel.call_later(0.002, record, "explicit", context=ctx)
        anywheel.call_later(0.003, record, "default")

    contextvars.Context().run(body)  # the caller's own context has nothing set
    settle(anywheel, lambda: len(seen) == 2)
    assert seen == [("explicit", "explicit"), ("default", "unset")]


def test_default_context_is_captured_at_scheduling(anywheel):
    seen = []

    def body():
        VAR.set("caller")
        anywheel.call_later(0.002, lambda: seen.append(VAR.get("unset")))
        VAR.set("changed after scheduling")
        anywheel.call_later(0.003, lambda: seen.append(VAR.get("unset")))

    contextvars.Context().run(body)
    settle(anywheel, lambda: len(seen) == 2)
    assert seen == ["caller", "changed after scheduling"]


@pytest.mark.parametrize("caller_has_vars", [False, True])
@pytest.mark.parametrize("same_tick", [False, True])
def test_callback_context_changes_do_not_leak(anywheel, caller_has_vars, same_tick):
    seen = []

    def writer():
        LEAK.set("from writer")
        VAR.set("overwritten by writer")
        seen.append(("writer", LEAK.get("unset"), VAR.get("unset")))

    def reader():
        seen.append(("reader", LEAK.get("unset"), VAR.get("unset")))

    def body():
        if caller_has_vars:
            VAR.set("caller")
        anywheel.call_later(0.002, writer)
        anywheel.call_later(0.002 if same_tick else 0.004, reader)
        if isinstance(anywheel, ManualWheel):
            anywheel.advance(0.01)  # callbacks run on this thread, inside this context
        assert wait_for(lambda: len(seen) == 2, timeout=5.0)
        # nothing came back into the caller's context
        assert LEAK.get("unset") == "unset"
        assert VAR.get("unset") == ("caller" if caller_has_vars else "unset")

    contextvars.Context().run(body)
    expected_var = "caller" if caller_has_vars else "unset"
    assert seen == [
        ("writer", "from writer", "overwritten by writer"),
        ("reader", "unset", expected_var),
    ]


def test_context_of_a_repeating_timer_is_used_for_every_run(manual):
    seen = []
    ctx = contextvars.Context()
    ctx.run(VAR.set, "ctx")
    h = manual.call_every(0.002, lambda: seen.append(VAR.get("unset")), context=ctx)
    manual.advance(0.006)
    h.cancel()
    assert seen == ["ctx"] * 3
