"""The documentation's code blocks as tests: README.md and docs/**/*.md, each
block run by Sybil through docs/blocks.py (its docstring has the rules)."""

import importlib.util
import sys
from pathlib import Path

from sybil import Sybil

_spec = importlib.util.spec_from_file_location(
    "pywheel_docs_blocks", Path(__file__).parent / "docs" / "blocks.py"
)
blocks = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(blocks)

pytest_collect_file = Sybil(
    parsers=[blocks.parse],
    patterns=["*.md"],  # pytest visits only testpaths: tests/, docs/, README.md
    setup=blocks.setup,
    teardown=blocks.teardown,
).pytest()
