"""The hostile-input figure plugin (tests/hostile_summary.py), run on a small test file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SAMPLE = """
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.hostile
@pytest.mark.parametrize("value", ["inf", "nan", "1e999"])
def test_three_inputs(value):
    assert value

@pytest.mark.hostile(guards="escalation", inputs=5)
def test_five_inputs_one_escalation():
    assert False, "a user raised their share"

@pytest.mark.hostile(guards="hang")
def test_recorded(record_property):
    record_property("hostile_inputs", 4)

@pytest.mark.hostile(guards="stranded")
@settings(max_examples=20, database=None)
@given(st.integers())
def test_hypothesis(n):
    pass

@pytest.mark.hostile
def test_skipped():
    pytest.skip("no Slurm here")

def test_not_hostile():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("the test's own set-up failed")

@pytest.mark.hostile
def test_errored(broken):
    pass
"""


def run_sample(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "hostile_summary", "-p", "no:cacheprovider",
         "-o", "addopts=--strict-markers", *args, str(tmp_path / "test_sample.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


# Counted the same when the tests run in pytest-xdist workers (tools/test --quick),
# whose reports alone reach the process that prints the figure.
@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_the_figure_counts_inputs_and_failures_by_what_they_guard(tmp_path, workers):
    res = run_sample(tmp_path, SAMPLE, *workers)
    out = res.stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("hostile inputs tried"))
    # 3 parametrized + 5 declared + 4 recorded + 20 Hypothesis examples (the first
    # passing example is run twice: generate, then the explicit reuse phase, so
    # Hypothesis reports >= 20); the skipped test and the unmarked one are not counted.
    n = int(line.split()[3])
    assert 32 <= n <= 40, line
    assert "(6 tests)" in line
    assert "crashes 0, hangs 0, priority escalations 1, jobs stranded 0" in line
    assert "1 hostile tests skipped (not counted)" in line
    assert "1 hostile tests errored (not counted)" in line
    assert "priority escalations: " in out and "test_five_inputs_one_escalation" in out


def test_a_misspelt_guard_is_a_usage_error(tmp_path):
    bad = "import pytest\n@pytest.mark.hostile(guards='oops')\ndef test_x():\n    pass\n"
    res = run_sample(tmp_path, bad)
    assert res.returncode != 0
    assert "use one of" in res.stdout + res.stderr
