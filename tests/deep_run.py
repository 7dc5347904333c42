"""The property suite's state machines for a fixed wall-clock budget.

    python tests/deep_run.py --minutes 20

Runs CoreMachine (the C wheel through cffi) and ManualMachine (the whole
binding) in alternating rounds of fresh random examples until the budget is
spent, then prints how many examples and steps each ran.  Any failure stops
it with hypothesis's shrunk example and a @reproduce_failure blob.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_properties as tp  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

STEPS = 120
ROUND = 50  # examples per round


def counted(machine_cls):
    class Counted(machine_cls):
        examples = 0
        steps = 0

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            type(self).examples += 1

        def check_invariants(self, *a, **k):
            type(self).steps += 1
            return super().check_invariants(*a, **k)

    Counted.__name__ = machine_cls.__name__
    return Counted


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=20)
    args = ap.parse_args()
    machines = [counted(tp.CoreMachine), counted(tp.ManualMachine)]
    opts = settings(
        max_examples=ROUND,
        stateful_step_count=STEPS,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    end = time.monotonic() + args.minutes * 60
    start = time.monotonic()
    rounds = 0
    while time.monotonic() < end:
        for m in machines:
            run_state_machine_as_test(m, settings=opts)
        rounds += 1
    minutes = (time.monotonic() - start) / 60
    for m in machines:
        print(f"{m.__name__}: {m.examples} examples, {m.steps} steps (invariant checks)")
    print(f"clean after {minutes:.1f} minutes, {rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
