"""A pytest plugin ``benchmarks/fuzz_bounds.py`` loads with ``-p fuzz_probe``
(this folder on PYTHONPATH); it changes nothing in the suite under test.

``FUZZ_PROBE_OUT=<file>``: one JSON line per test report that failed,
appended to the file: its node id, when (setup, call, teardown), the first
line of its error, and the ``pywheel.testing timing fuzz`` section pytest's
plugin added (absent: the failure was not a fuzz run's, e.g. the punctual
run 0, or a stock run)."""

import json
import os


def pytest_runtest_logreport(report):
    out = os.environ.get("FUZZ_PROBE_OUT")
    if not out or not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr)
    fuzz = next((text for name, text in report.sections if name.endswith("timing fuzz")), None)
    with open(out, "a") as f:
        f.write(json.dumps({"nodeid": report.nodeid, "when": report.when,
                            "error": message.splitlines()[0][:300] if message else "",
                            "fuzz": fuzz}) + "\n")  # fmt: skip
