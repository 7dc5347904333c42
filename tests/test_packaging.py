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
TESTED = ["3.11", "3.12", "3.13"]  # .ci/run runs the suite on each


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
    meta = importlib.metadata.metadata("pywheel")
    after_last = f"3.{int(TESTED[-1].split('.')[1]) + 1}"
    assert SpecifierSet(meta["Requires-Python"]) == SpecifierSet(f">={TESTED[0]},<{after_last}")
    versions = sorted(
        c.rsplit(" :: ", 1)[1]
        for c in meta.get_all("Classifier")
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert versions == TESTED
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in TESTED


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

SOURCES = ["wheel.c", "driver.c", "module.c", "test_wheel.c", "test_driver.c"]


@pytest.mark.skipif(not os.path.isdir(CSRC), reason=f"needs the C sources: {CSRC} is absent")
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("source", SOURCES)
def test_c_compiles_without_warnings(compiler, source):
    # `make warnings` runs the same check; .ci/run installs clang when it can.
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (Debian: apt-get install {compiler})")
    include = sysconfig.get_paths()["include"]
    cmd = [compiler, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"]
    cmd += ["-I", CSRC, "-I", include, os.path.join(CSRC, source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
