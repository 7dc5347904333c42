"""A limit (docs/explanation/guarantees.md, "Limits"): pywheel refuses to load in a
subinterpreter, since its threads, its fork handling and its exit hook are
process-wide.  In a child interpreter with a timeout; skipped where the
Python has no way to start a subinterpreter."""

import pytest
from helpers import clean_exit, lines, run

# ---------------------------------------------------------------------------
# subinterpreters: each has its own pywheel module and atexit hook


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


needs_subinterp = pytest.mark.skipif(
    not (_has("_testcapi") and (_has("_interpreters") or _has("_xxsubinterpreters"))),
    reason="needs CPython's _testcapi and _interpreters (3.13+) or _xxsubinterpreters",
)


@needs_subinterp
def test_pywheel_refuses_to_load_in_a_subinterpreter():
    # Subinterpreters are refused at import (ImportError), whichever way they
    # are made; the main interpreter's wheels are unaffected, before and after,
    # and so is the exit status, with a subinterpreter left alive at exit.
    # (Earlier builds loaded there: a subinterpreter's exit then stopped every
    # interpreter from making wheels, a leftover one turned the exit status
    # into 0, and one ending under a slow callback aborted the process.)
    proc = run(
        """
        import _testcapi
        try:
            import _interpreters as interpreters  # 3.13 renamed it
        except ImportError:
            import _xxsubinterpreters as interpreters

        def run_in_new_interpreter(isolated, code):
            # The error that code raised there, as text ("" if none).
            if hasattr(interpreters, "new_config"):  # 3.13: configs; errors returned
                interp = interpreters.create("isolated" if isolated else "legacy")
                err = interpreters.run_string(interp, code)
                return err.formatted if err else ""
            interp = interpreters.create(isolated=isolated)
            try:
                interpreters.run_string(interp, code)
            except interpreters.RunFailedError as e:
                return str(e)
            return ""

        main_wheel = pywheel.Wheel()
        main_wheel.call_every(0.001, lambda: None)
        say("run_in_subinterp", _testcapi.run_in_subinterp("import pywheel"))
        for isolated in (False, True):
            e = run_in_new_interpreter(isolated, "import pywheel")  # left alive at exit
            say("refused", "ImportError" in e and "subinterpreter" in e)
        w = pywheel.Wheel()
        ev = threading.Event()
        w.call_later(0, ev.set)
        fired = main_wheel.stats()["fired"]
        say("main wheels work", ev.wait(5), wait_for(lambda: main_wheel.stats()["fired"] > fired))
        sys.exit(3)
        """
    )
    clean_exit(proc, 3)
    assert lines(proc) == [
        "run_in_subinterp -1",
        "refused True",
        "refused True",
        "main wheels work True True",
    ]
    assert "cannot be loaded in a subinterpreter" in proc.stderr  # run_in_subinterp's report
