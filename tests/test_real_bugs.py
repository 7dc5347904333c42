"""examples/real_bugs: every corpus bug is real on the stock asyncio loop,
without pywheel: the buggy version fails the check, the fixed one passes.

Each version runs in its cached venv (examples/real_bugs/_venv.py).  The
normal suite uses the venvs already made (by ``python -m examples.real_bugs``
or by ``pytest -m real_bugs``) and skips the rest, saying so; the
``real_bugs`` variant makes them, which needs PyPI (skipped with the reason
when it cannot).  It is not part of CI's slow subset: making eighteen venvs,
four of them with pywheel compiled for another CPython, would take CI past
its time; ``make real-bugs`` runs it."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "examples" / "real_bugs").is_dir():
    pytest.skip("examples/ is not next to tests/", allow_module_level=True)
if str(ROOT) not in sys.path:  # an installed-wheel run keeps the tree off the path
    sys.path.insert(0, str(ROOT))

from examples.real_bugs import BUGS, _venv, meta  # noqa: E402


def test_every_module_is_in_the_corpus():
    """A bug module left out of BUGS would be neither scored nor checked."""
    folder = _venv.ROOT / "examples" / "real_bugs"
    modules = sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_"))
    assert modules == sorted(BUGS)
    assert len(BUGS) == len(set(BUGS))


@pytest.mark.parametrize("name", BUGS)
def test_corpus_module_is_complete(name):
    bug = meta(name)  # the library is installed only in the bug's venvs
    for attr in ("REF", "PROMISE", "BUGGY", "FIXED"):
        assert attr in bug, f"{name} has no {attr}"
    assert "#" in bug["REF"], "the upstream reference names an issue or PR"
    assert bug["BUGGY"] != bug["FIXED"]
    source = (_venv.ROOT / "examples" / "real_bugs" / f"{name}.py").read_text()
    for fn in ("def installed(", "def on_stock(", "async def scenario("):
        assert fn in source, f"{name} has no {fn}"


def _check_on_stock(name, venv_for):
    bug = meta(name)
    verdicts = {}
    for side in ("buggy", "fixed"):
        python, requirement = bug[side.upper()]
        vpy = venv_for(requirement, python)
        r = _venv.run_in(vpy, "stock", name, timeout=300)
        assert "error" not in r, f"{side}: {r['error']}"
        verdicts[side] = r
    assert verdicts["buggy"]["violation"], (
        f"{verdicts['buggy']['version']} passes on the stock loop: the bug does not show"
    )
    assert verdicts["fixed"]["violation"] is None, (
        f"{verdicts['fixed']['version']} fails on the stock loop: {verdicts['fixed']['violation']}"
    )


def _cached_or_skip(requirement, python):
    vpy = _venv.cached(requirement, python)
    if vpy is None:
        where = requirement or f"CPython {python}"
        pytest.skip(f"no cached venv for {where} (python -m examples.real_bugs, or -m real_bugs)")
    return vpy


def _ensure_or_skip(requirement, python):
    try:
        return _venv.ensure(requirement, python)
    except _venv.Unavailable as exc:
        pytest.skip(f"cannot install: {exc}")


@pytest.mark.parametrize("name", BUGS)
def test_shown_real_on_stock_cached(name):
    _check_on_stock(name, _cached_or_skip)


@pytest.mark.real_bugs
@pytest.mark.parametrize("name", BUGS)
def test_shown_real_on_stock(name):
    _check_on_stock(name, _ensure_or_skip)
