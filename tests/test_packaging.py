"""What users install: metadata, version, licence, and C sources that two
compilers accept without a warning.

The run that installs the wheel (make test-installed, .ci/test-dist) sets
PYWHEEL_EXPECT_INSTALLED=1, and the first test then proves that the suite
tests the installed copy, not a source tree.
"""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest
from helpers import ROOT
from packaging.specifiers import SpecifierSet  # a dependency of pytest

import pywheel

CSRC = os.path.join(ROOT, "csrc")
# .ci/run runs the suite on each: 3.11-3.13 on the machine, 3.14 and 3.15 in
# a Debian forky chroot (.ci/forky).
TESTED = ["3.11", "3.12", "3.13", "3.14", "3.15"]


@pytest.mark.skipif(
    not os.environ.get("PYWHEEL_EXPECT_INSTALLED"), reason="only in the installed-wheel run"
)
def test_the_installed_copy_is_under_test():
    pkg = os.path.realpath(os.path.dirname(pywheel.__file__))
    platlib = os.path.realpath(sysconfig.get_paths()["platlib"])
    assert pkg == os.path.join(platlib, "pywheel")
    assert os.path.realpath(os.path.dirname(pywheel._core.__file__)) == pkg
    assert not pkg.startswith(os.path.realpath(ROOT) + os.sep)


def test_version_has_one_source():
    assert pywheel.__version__ == importlib.metadata.version("pywheel")
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc)?\d*", pywheel.__version__)


def test_metadata_states_what_is_tested():
    # A floor and no upper cap (a cap makes resolvers pick old releases and
    # refuse new Pythons); the classifiers name exactly the versions CI runs.
    meta = importlib.metadata.metadata("pywheel")
    spec = SpecifierSet(meta["Requires-Python"])
    assert spec == SpecifierSet(f">={TESTED[0]}")
    assert all(s.operator == ">=" for s in spec)
    assert "3.16" in spec and "3.99" in spec and "3.10" not in spec
    versions = sorted(
        (
            c.rsplit(" :: ", 1)[1]
            for c in meta.get_all("Classifier")
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
        ),
        key=lambda v: tuple(map(int, v.split("."))),
    )
    assert versions == TESTED
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in TESTED


@pytest.mark.skipif(
    not os.path.isfile(os.path.join(ROOT, ".ci", "forky")), reason="needs .ci/ (a checkout's)"
)
def test_ci_runs_every_classified_version():
    # .ci/run's SUPPORTED (the machine's Pythons) and .ci/forky's VERSIONS
    # (the chroot's) together are TESTED, each once.
    def array(path, name):
        with open(os.path.join(ROOT, ".ci", path)) as f:
            m = re.search(rf"^{name}=\(([^)]*)\)", f.read(), re.M)
        assert m, f"no {name}=(...) in .ci/{path}"
        return m.group(1).split()

    ran = array("run", "SUPPORTED") + array("forky", "VERSIONS")
    assert sorted(ran, key=lambda v: tuple(map(int, v.split(".")))) == TESTED


def test_wheel_builds_are_the_tested_versions():
    # cibuildwheel's selector: one CPython build per tested version, and the
    # free-threaded 3.14t that CI tests (.ci/python-ft; cp314t-* is not
    # matched by cp314-*), no other free-threaded one.
    tomllib = pytest.importorskip("tomllib")
    path = os.path.join(ROOT, "pyproject.toml")
    if not os.path.isfile(path):
        pytest.skip(f"needs {path}")
    with open(path, "rb") as f:
        build = tomllib.load(f)["tool"]["cibuildwheel"]["build"].split()
    assert build == [f"cp{v.replace('.', '')}-*" for v in TESTED] + ["cp314t-*"]
    ci_run = os.path.join(ROOT, ".ci", "run")
    if os.path.isfile(ci_run):  # a checkout's (cibuildwheel's test copy has no .ci/)
        with open(ci_run) as f:
            assert ".ci/python-ft" in f.read(), "a cp314t wheel needs CI's run on 3.14t"


def test_license_is_declared_and_shipped():
    dist = importlib.metadata.distribution("pywheel")
    assert dist.metadata["License-Expression"] == "MIT"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    # no licence classifier beside an SPDX expression (PEP 639)
    assert not any(c.startswith("License ::") for c in dist.metadata.get_all("Classifier"))
    shipped = [f for f in dist.files or [] if f.name == "LICENSE"]
    assert shipped and "MIT License" in shipped[0].read_text()


def test_stubs_and_marker_are_shipped():
    pkg = os.path.dirname(os.path.abspath(pywheel.__file__))
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    assert os.path.isfile(os.path.join(pkg, "_core.pyi"))


# ---- C: no warnings under -Wall -Wextra, with gcc and with clang -------------

# Every .c of the core (csrc/core/) and of the binding (csrc/binding/), as
# paths under csrc/; a file added to either folder is checked unasked.
SOURCES = sorted(
    f"{room}/{name}"
    for room in ("core", "binding")
    if os.path.isdir(os.path.join(CSRC, room))
    for name in os.listdir(os.path.join(CSRC, room))
    if name.endswith(".c")
)


@pytest.mark.skipif(not os.path.isdir(CSRC), reason=f"needs the C sources: {CSRC} is absent")
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("source", SOURCES)
def test_c_compiles_without_warnings(compiler, source):
    # `make warnings` runs the same check; .ci/run installs clang when it can.
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (Debian: apt-get install {compiler})")
    include = sysconfig.get_paths()["include"]
    cmd = [compiler, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"]
    cmd += ["-I", os.path.join(CSRC, "core"), "-I", os.path.join(CSRC, "binding")]
    cmd += ["-I", include, os.path.join(CSRC, source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
