"""Cached virtual environments, one per (interpreter, package version), for
the corpus: ``~/.cache/pywheel-real-bugs/<name>/``.

A venv on the interpreter running this tree gets pywheel from the tree
itself (the runner appends the tree to ``sys.path``, after site-packages);
a venv on another CPython gets pywheel built and installed from the tree,
keyed by a hash of the tree's sources so an edit rebuilds it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the pywheel tree
CACHE = Path(os.environ.get("PYWHEEL_REAL_BUGS_CACHE", Path.home() / ".cache/pywheel-real-bugs"))
HYPOTHESIS = "hypothesis>=6.80"
_THIS = f"{sys.version_info.major}.{sys.version_info.minor}"
# A free-threaded interpreter (3.14t) keeps venvs of its own: its packages
# are built for another ABI.  The releases of the corpus predate it, and
# their C accelerators do not build there; each has a pure-Python fallback,
# chosen with these switches (aiohttp and the packages it needs).
_FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
_PURE = {
    f"{name}_NO_EXTENSIONS": "1"
    for name in ("AIOHTTP", "MULTIDICT", "YARL", "FROZENLIST", "PROPCACHE")
}


class Unavailable(Exception):
    """The venv cannot be made here (offline, no such interpreter)."""


def _tree_hash() -> str:
    h = hashlib.sha256()
    for sub in ("csrc", "pywheel", "setup.py", "pyproject.toml"):
        p = ROOT / sub
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and f.suffix in (".c", ".h", ".py", ".pyi", ".toml", ".typed"):
                h.update(str(f.relative_to(ROOT)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _interpreter(version: str | None) -> str:
    """The python executable for "3.12" (None: the one running this)."""
    if version is None or version == _THIS:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    # pyenv's shims exist only for the selected versions; its builds do too
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)
    for exe in candidates:
        if exe is None:
            continue
        try:
            return _check(str(exe), version)
        except Unavailable as exc:
            last = exc
    if "last" in locals():
        raise last
    raise Unavailable(f"no python{version} on PATH or under pyenv")


def _check(exe: str, version: str) -> str:
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError) as exc:
        raise Unavailable(f"python{version} does not run: {exc}") from None
    if out != version:
        raise Unavailable(f"{exe} is {out}")
    return exe


def _run(cmd: list[str], what: str, env: dict | None = None) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env)
    if r.returncode:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise Unavailable(f"{what} failed: " + " | ".join(tail))


def _where(requirement: str | None, python: str | None) -> tuple[Path, bool]:
    """(the venv's folder, whether it runs on this interpreter)."""
    ver = python or _THIS
    own = ver == _THIS
    name = f"py{ver}{'t' if own and _FREE_THREADED else ''}-" + (
        requirement.replace("==", "-").replace(" ", "+") if requirement else "stdlib"
    )
    if not own:
        name += "-pywheel-" + _tree_hash()
    return CACHE / name, own


def cached(requirement: str | None, python: str | None = None) -> Path | None:
    """The venv's python if ``ensure()`` already made it, else None."""
    venv, _ = _where(requirement, python)
    return venv / "bin" / "python" if (venv / "ready.json").exists() else None


def ensure(requirement: str | None, python: str | None = None) -> Path:
    """The venv's python for ``requirement`` ("aiorwlock==1.1.0"; several
    separated by spaces, "psycopg-pool==3.3.0 psycopg==3.3.2"; or None for
    only hypothesis) on CPython ``python`` ("3.12"; None: this one), made
    once and cached.  Raises Unavailable with the reason if it cannot."""
    venv, own = _where(requirement, python)
    vpy = venv / "bin" / "python"
    stamp = venv / "ready.json"
    if stamp.exists():
        return vpy
    exe = _interpreter(python)
    ver = python or _THIS
    if venv.exists():  # a half-made one from an interrupted run
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([exe, "-m", "venv", str(venv)], f"python{ver} -m venv")
    pip = [str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    try:
        _run(
            pip + [HYPOTHESIS] + (requirement.split() if requirement else []),
            f"pip install {requirement}",
            env={**os.environ, **_PURE} if own and _FREE_THREADED else None,
        )
        if not own:
            _run(pip + [str(ROOT)], f"pip install pywheel (this tree) on python{ver}")
    except Unavailable:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    stamp.write_text(json.dumps({"requirement": requirement, "python": ver}))
    return vpy


def run_in(vpy: Path, *args: str, timeout: float = 900) -> dict:
    """Run ``_runner.py *args`` in the venv; its last stdout line is JSON."""
    cmd = [str(vpy), str(Path(__file__).with_name("_runner.py")), *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = r.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": (r.stderr or r.stdout).strip()[-2000:]}
