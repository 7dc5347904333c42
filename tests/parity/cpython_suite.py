"""Runs CPython's whole test.test_asyncio (or the modules named) and writes
each test's outcome to a JSON file: {"test id": "pass"|"fail"|"error"|"skip"}.

Which loop the suite runs on is decided by the environment, not here: the
parity harness puts tests/parity/site first on PYTHONPATH, and its
sitecustomize swaps in WheelEventLoop when PYWHEEL_PARITY_LOOP=wheel.

    python tests/parity/cpython_suite.py OUT.json [test.test_asyncio.test_tasks ...]
"""

import json
import sys
import time
import unittest


def main(out: str, names: list[str]) -> int:
    outcomes: dict[str, str] = {}

    class Result(unittest.TextTestResult):
        def addSuccess(self, test):
            super().addSuccess(test)
            outcomes.setdefault(test.id(), "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            outcomes[test.id()] = "fail"

        def addError(self, test, err):
            super().addError(test, err)
            # setUpModule/tearDownClass errors arrive as _ErrorHolder objects.
            outcomes[test.id()] = "error"

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            outcomes.setdefault(test.id(), "skip")

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            outcomes.setdefault(test.id(), "pass")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            outcomes[test.id()] = "fail"

        def addSubTest(self, test, subtest, err):
            super().addSubTest(test, subtest, err)
            if err is not None:
                outcomes[test.id()] = "fail"

    t0 = time.monotonic()
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = unittest.TextTestRunner(verbosity=1, resultclass=Result).run(suite)
    with open(out, "w") as f:
        json.dump(outcomes, f, indent=0, sort_keys=True)
    print(
        f"ran {result.testsRun} in {time.monotonic() - t0:.0f}s, failures {len(result.failures)}, "
        f"errors {len(result.errors)}, skipped {len(result.skipped)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:] or ["test.test_asyncio"]))
