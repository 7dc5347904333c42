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

import contextlib
import fcntl
import glob
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
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


def tagged_tests(cache: str, src: str, repo: str, tag: str, folder: str) -> None:
    """``folder`` (its tests) from the GitHub repository at the release's tag,
    into the extracted sdist ``src``, for a project whose sdist leaves them
    out: from ``$PYWHEEL_SUITE_MIRRORS/<owner>+<name>/repo`` (a git mirror
    holding the tag) if set, else GitHub's archive of the tag, downloaded once
    into ``<cache>/sdists``."""
    if os.path.isdir(os.path.join(src, folder)):
        return
    owner, name = repo.split("/")
    mirrors = os.environ.get("PYWHEEL_SUITE_MIRRORS")
    tmp = src + ".tests-partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if mirrors:
        git_dir = os.path.join(mirrors, f"{owner}+{name}", "repo")
        r = subprocess.run(["git", "--git-dir", git_dir, "archive", "--format=tar", tag, folder],
                           capture_output=True)  # fmt: skip
        if r.returncode:
            raise Unavailable(f"git archive {tag} {folder} in {git_dir}: {r.stderr.decode()}")
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
            tf.extractall(tmp, filter="data")
        got = os.path.join(tmp, folder)
    else:
        archive = os.path.join(cache, "sdists", f"{name}-{tag}-github.tar.gz")
        if not os.path.exists(archive):
            url = f"https://codeload.github.com/{repo}/tar.gz/refs/tags/{tag}"
            try:
                with urllib.request.urlopen(url, timeout=120) as resp:
                    data = resp.read()
            except OSError as exc:
                raise Unavailable(
                    f"{repo}'s tests at {tag} ({url}): {exc}; or set PYWHEEL_SUITE_MIRRORS "
                    f"to a folder holding {owner}+{name}/repo, a git mirror"
                ) from None
            with open(archive + ".part", "wb") as f:
                f.write(data)
            os.replace(archive + ".part", archive)
        with tarfile.open(archive) as tf:
            prefix = tf.getnames()[0].split("/")[0]
            members = [m for m in tf.getmembers() if m.name.startswith(f"{prefix}/{folder}/")]
            tf.extractall(tmp, members=members, filter="data")
        got = os.path.join(tmp, prefix, folder)
    os.replace(got, os.path.join(src, folder))
    shutil.rmtree(tmp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server():
    """A redis-server (Debian's package, installed with apt-get if missing
    and root) on a free port of 127.0.0.1, no persistence, for one run;
    yields its URL and stops it after."""
    exe = shutil.which("redis-server")
    if exe is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "redis-server"],
                       capture_output=True)  # fmt: skip
        exe = shutil.which("redis-server")
    if exe is None:
        raise Unavailable("no redis-server (apt-get install redis-server)")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--enable-debug-command", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Unavailable(f"redis-server on port {port} did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
