"""Let hypothesis find, shrink and replay each example's bug."""

from __future__ import annotations

import importlib

from hypothesis import HealthCheck, Phase, find, given, settings

from pywheel import testing


def fails(module, timing, fixed: bool = False) -> bool:
    """True if ``scenario(fixed)`` breaks under ``timing``."""
    try:
        testing.run(module.scenario(fixed), timing=timing, limit=3600)
    except AssertionError:
        return True
    return False


def hunt(name: str, max_examples: int = 300):
    """(examples until the first failure, the shrunk Timing, shrink calls)."""
    module = importlib.import_module(f"{__package__}.{name}")
    calls = [0, None]

    def condition(timing) -> bool:
        calls[0] += 1
        bad = fails(module, timing)
        if bad and calls[1] is None:
            calls[1] = calls[0]
        return bad

    shrunk = find(
        testing.timings(**module.PERTURB),
        condition,
        settings=settings(
            max_examples=max_examples,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
        ),
    )
    return calls[1], shrunk, calls[0]


def survives(name: str, max_examples: int = 150) -> None:
    """The fixed twin passes ``max_examples`` Timings (raises if not)."""
    module = importlib.import_module(f"{__package__}.{name}")

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(testing.timings(**module.PERTURB))
    def fixed_survives(timing):
        testing.run(module.scenario(fixed=True), timing=timing, limit=3600)

    fixed_survives()
