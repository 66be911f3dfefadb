"""SLURM_GAVEL_REQUIRE_SLURM=1 (tools/test exports it): every skip of a Slurm test fails.

Runs the hook of tests/slurm_required.py on a throwaway suite in a child pytest: a
slurm-marked test that skips itself, one skipped by a skipif marker and one whose
fixture skips all fail under the variable; a skip of a test that is not a Slurm
test, and an expected failure, stay as they are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
from slurm_required import pytest_runtest_makereport  # noqa: F401

def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: a Slurm test")

@pytest.fixture
def cluster():
    pytest.skip("Slurm not installed")
"""

SUITE = """
import pytest

@pytest.mark.slurm
def test_own_skip():
    pytest.skip("gcc missing")

@pytest.mark.slurm
@pytest.mark.skipif(True, reason="no runuser")
def test_skipif():
    pass

@pytest.mark.slurm
def test_fixture_skip(cluster):
    pass

def test_not_slurm():
    pytest.skip("not a Slurm test")

@pytest.mark.slurm
@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
"""


def _run(tmp_path: Path, require: str | None) -> tuple[int, str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_GAVEL_REQUIRE_SLURM"}
    env["PYTHONPATH"] = f"{TESTS}{os.pathsep}{env.get('PYTHONPATH', '')}"
    if require is not None:
        env["SLURM_GAVEL_REQUIRE_SLURM"] = require
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    return res.returncode, res.stdout


def test_every_skip_of_a_slurm_test_fails_when_slurm_is_required(tmp_path):
    code, out = _run(tmp_path, "1")
    assert code == 1, out
    # A skip in the test fails it; one at set-up (skipif, a fixture) is an error.
    assert "1 failed, 1 skipped, 1 xfailed, 2 errors" in out, out
    assert "FAILED test_suite.py::test_own_skip" in out
    assert "ERROR at setup of test_skipif" in out and "ERROR at setup of test_fixture_skip" in out
    for reason in ("gcc missing", "no runuser", "Slurm not installed"):
        assert f"while SLURM_GAVEL_REQUIRE_SLURM=1 (CI): Skipped: {reason}" in out, out


def test_without_the_variable_skips_stay_skips(tmp_path):
    code, out = _run(tmp_path, None)
    assert code == 0, out
    assert "4 skipped, 1 xfailed" in out, out


def test_tools_test_requires_slurm():
    text = (TESTS.parent / "tools" / "test").read_text()
    assert "export SLURM_GAVEL_REQUIRE_SLURM=1" in text
