"""python -m examples.timing_bugs: every example's bug, found and shrunk."""

import importlib
import time

from . import EXAMPLES
from .hunt import fails, hunt, survives

for name in EXAMPLES:
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ImportError as exc:
        print(f"{name}: skipped ({exc})")
        continue
    assert not fails(module, None), f"{name}: the punctual run fails"
    t0 = time.perf_counter()
    first, shrunk, calls = hunt(name)
    dt = time.perf_counter() - t0
    print(
        f"{name} {module.PERTURB}: found after {first} examples, {calls} runs with shrinking,"
        f" {dt:.1f} s"
    )
    print(f"  shrunk: {shrunk!r}")
    assert fails(module, shrunk), f"{name}: the shrunk Timing does not replay"

    survives(name, 150)
    print("  fixed twin: 150 examples passed")
