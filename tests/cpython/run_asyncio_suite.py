"""Runs parts of CPython's own asyncio test suite on pywheel's WheelEventLoop.

The suite makes loops three ways: through the policy (asyncio.Runner,
IsolatedAsyncioTestCase, asyncio.new_event_loop), and by instantiating
asyncio.SelectorEventLoop directly (test_events) or asyncio.EventLoop (3.13's
name for the default loop, test_runners).  All are pointed at WheelEventLoop
here.  Prints unittest's summary; exits non-zero on failure.

    python tests/cpython/run_asyncio_suite.py [test.test_asyncio.test_timeouts ...]
"""

import asyncio
import sys
import unittest

import pywheel.asyncio as pwa

DEFAULT = [
    "test.test_asyncio.test_timeouts",
    "test.test_asyncio.test_waitfor",
    "test.test_asyncio.test_events",
    "test.test_asyncio.test_base_events",
    "test.test_asyncio.test_tasks",
    "test.test_asyncio.test_taskgroups",
    "test.test_asyncio.test_locks",
    "test.test_asyncio.test_queues",
    "test.test_asyncio.test_streams",
    "test.test_asyncio.test_sock_lowlevel",
]

# Tests that cannot apply to WheelEventLoop, and why (none at present).
EXCLUDED: set[str] = set()


class Policy(pwa.EventLoopPolicy):
    pass


def patch() -> None:
    # Modules call asyncio.set_event_loop_policy(None) in tearDownModule:
    # make "None" mean ours too, so every module runs on the wheel loop.
    real_set = asyncio.set_event_loop_policy

    def set_policy(policy):
        real_set(Policy() if policy is None else policy)

    asyncio.set_event_loop_policy = set_policy
    asyncio.events.set_event_loop_policy = set_policy
    set_policy(None)
    asyncio.SelectorEventLoop = pwa.WheelEventLoop
    if hasattr(asyncio, "EventLoop"):  # 3.13's name for the default loop class
        asyncio.EventLoop = pwa.WheelEventLoop


def iter_tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from iter_tests(t)
        else:
            yield t


def main(names: list[str]) -> int:
    patch()
    created = []
    real_init = pwa.WheelEventLoop.__init__

    def counting_init(self, *a, **k):
        created.append(1)
        real_init(self, *a, **k)

    pwa.WheelEventLoop.__init__ = counting_init
    on_wheel = []

    class Result(unittest.TextTestResult):
        """Notes which tests made at least one WheelEventLoop: the others
        test loop-independent code or asyncio's own test loop."""

        def startTest(self, test):
            self._made = len(created)
            super().startTest(test)

        def stopTest(self, test):
            super().stopTest(test)
            if len(created) > self._made:
                on_wheel.append(test.id())

    suite = unittest.TestSuite(
        t
        for t in iter_tests(unittest.defaultTestLoader.loadTestsFromNames(names))
        if t.id() not in EXCLUDED
    )
    result = unittest.TextTestRunner(verbosity=1, resultclass=Result).run(suite)
    print(
        f"ran {result.testsRun}, on a WheelEventLoop {len(on_wheel)}, "
        f"failures {len(result.failures)}, errors {len(result.errors)}, "
        f"skipped {len(result.skipped)}"
    )
    return 0 if result.wasSuccessful() and on_wheel else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or DEFAULT))
