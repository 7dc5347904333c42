"""Other projects' test suites from their sdists, in cached venvs: what the
parity harness (tests/parity/parity.py) and the real-suite benchmark
(benchmarks/virtual_suites.py, tests/test_virtual_suites.py) share.

- ``sdist_dir(cache, "name==version")``: the sdist from PyPI (``pip download
  --no-binary :all:``), downloaded once into ``<cache>/sdists`` and extracted
  into ``<cache>/src``;
- ``make_venv(path, base, deps, sdist=..., env=...)``: a venv made once (a
  ``.ready`` stamp), with the suite's test dependencies and the project itself
  installed from its sdist;
- ``link_pywheel(cache, py, plugin=...)``: pywheel from this checkout in that
  venv through a ``.pth`` naming a folder that holds only a link to the
  package (the checkout itself would also expose its egg-info), and, with
  ``plugin=True``, a ``.dist-info`` that registers pywheel's pytest plugin as
  an installed pywheel does (``pytest11``), so ``pytest --virtual-time`` works
  as it does for a user; the extension is built in place for that Python if
  missing;
- ``junit_outcomes(xml)``, ``node_id(src, tid)``: what a run's junit file says
  of each test.

A download or install that fails raises ``Unavailable`` with pip's last lines
(offline, no such version), so a test can skip saying why.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: aiohttp's test dependencies (its requirements/test-common*.in, less xdist,
#: codspeed, docker and mypy), without pytest, which each harness pins.
AIOHTTP_TEST_DEPS = [
    "pytest-mock",
    "pytest-timeout",
    "freezegun",
    "trustme",
    "blockbuster",
    "isal",
    "zlib-ng",
    "proxy.py>=2.4.4rc5",
    "re-assert",
    "coverage",  # its filterwarnings name a coverage warning class
]
#: aiohttp built pure Python (no C compiler involved), its tests minus those
#: its own addopts deselect.
AIOHTTP_ENV = {"AIOHTTP_NO_EXTENSIONS": "1"}
AIOHTTP_SELECT = ["-m", "not dev_mode and not autobahn and not internal"]


class Unavailable(Exception):
    """An sdist or a dependency cannot be had here (offline, no such version)."""


def find_python(version: str) -> str | None:
    pyenv = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
    candidates = sorted(glob.glob(pyenv))[::-1] + [shutil.which(f"python{version}")]
    for exe in candidates:  # a pyenv shim may exist for a version it cannot run
        if exe and subprocess.run([exe, "-c", ""], capture_output=True).returncode == 0:
            return exe
    return None


def sh(cmd: list[str], **kw) -> None:
    subprocess.run(cmd, check=True, **kw)


def _fetch(cmd: list[str], what: str, **kw) -> None:
    """Run a pip command; its failure is Unavailable, with pip's last lines."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise Unavailable(f"{what} failed: " + " | ".join(tail))


def sdist_dir(cache: str, spec: str) -> str:
    """The extracted sdist of spec ("name==version"), downloaded once."""
    name, version = spec.split("==")
    dl = os.path.join(cache, "sdists")
    os.makedirs(dl, exist_ok=True)
    pattern = os.path.join(dl, f"{name.replace('-', '_')}-{version}.tar.gz")
    alt = os.path.join(dl, f"{name}-{version}.tar.gz")
    if not (os.path.exists(pattern) or os.path.exists(alt)):
        _fetch([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                "--no-deps", spec, "-d", dl], f"pip download {spec}")  # fmt: skip
    archive = pattern if os.path.exists(pattern) else alt
    src = os.path.join(cache, "src")
    target = os.path.join(src, os.path.basename(archive)[: -len(".tar.gz")])
    if not os.path.isdir(target):
        os.makedirs(src, exist_ok=True)
        with tarfile.open(archive) as tf:
            tf.extractall(src, filter="data")
    return target


def build_extension(py: str) -> None:
    """pywheel's extension for this Python, built in place if missing."""
    tag = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if os.path.exists(os.path.join(ROOT, "pywheel", "_core" + tag)):
        return
    with open("/tmp/pywheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sh([py, "setup.py", "-q", "build_ext", "--inplace"], cwd=ROOT)


def make_venv(
    path: str, base: str, deps: list[str], sdist: str | None = None, env: dict | None = None
) -> str:
    """The venv at path (made once from the interpreter base, with deps and
    the sdist folder installed); returns its python."""
    py = os.path.join(path, "bin", "python")
    stamp = os.path.join(path, ".ready")
    if os.path.exists(stamp):
        return py
    print(f"[sdists] creating {path}", file=sys.stderr, flush=True)
    sh([base, "-m", "venv", "--clear", path])
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    try:
        _fetch([*pip, "setuptools>=77", *deps], f"pip install of {path}'s test dependencies")
        if sdist:
            _fetch([*pip, sdist], f"pip install {sdist}", env=dict(os.environ, **(env or {})))
    except Unavailable:
        shutil.rmtree(path, ignore_errors=True)
        raise
    open(stamp, "w").close()
    return py


_DIST_INFO = "pywheel_checkout-0.dist-info"


def link_pywheel(cache: str, py: str, plugin: bool = False) -> None:
    """pywheel from this checkout in the venv of py (see the module's doc)."""
    link_dir = os.path.join(cache, "pywheel-plugin" if plugin else "pywheel-only")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "pywheel")
    if os.path.realpath(link) != os.path.join(ROOT, "pywheel"):
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.join(ROOT, "pywheel"), link)
    if plugin:
        info = os.path.join(link_dir, _DIST_INFO)
        os.makedirs(info, exist_ok=True)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: pywheel-checkout\nVersion: 0\n")
        with open(os.path.join(info, "entry_points.txt"), "w") as f:
            f.write("[pytest11]\npywheel = pywheel.testing.pytest_plugin\n")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    with open(os.path.join(site, "pywheel-checkout.pth"), "w") as f:
        f.write(link_dir + "\n")
    build_extension(py)


def junit_outcomes(path: str) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        if "failure" in tags:
            outcome = "fail"
        elif "error" in tags:
            # an error in teardown after a pass is reported as a second entry
            outcome = "error"
        elif "skipped" in tags:
            outcome = "skip"
        else:
            outcome = "pass"
        if outcomes.get(tid) in ("fail", "error"):
            continue
        outcomes[tid] = outcome
    return outcomes


def node_id(src: str, tid: str) -> str:
    """pytest's node id for a junit "classname::name" id."""
    classname, name = tid.split("::", 1)
    parts = classname.split(".")
    for k in range(len(parts), 0, -1):
        path = "/".join(parts[:k]) + ".py"
        if os.path.exists(os.path.join(src, path)):
            return "::".join([path, *parts[k:], name])
    return tid
