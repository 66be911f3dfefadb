"""benchmarks/bench_dw_threshold.py, whose figures set mm_lp.DW_MIN_COLUMNS: it times
both solvers on every class LP a run solves, and leaves the run's results as shipped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_dw_threshold.py"
# 500 jobs, one per 20 s, on 720 GPUs: class LPs from a few columns to ~1,500, so
# some are above the threshold (1,200) and take the decomposition's answer.
SIMULATE = [
    "simulate", "--generate", "500", "--interarrival", "20",
    "--cluster", "v100:60x4,p100:60x4,k80:60x4", "--row-spread", "0.3", "--seed", "0",
    "--policy", "max_min_fairness", "--no-progress", "--no-wall-time",
]  # fmt: skip
TIMING = {"wall_seconds", "solve_seconds"}


def _summary(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in TIMING}


# Slow (full tier only: tools/test --help): every LP of a trace timed twice, 36 s.
@pytest.mark.slow
def test_every_lp_is_timed_both_ways_and_the_run_is_the_shipped_one(tmp_path):
    timed, plain = tmp_path / "timed.json", tmp_path / "plain.json"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--", *SIMULATE, "--json", str(timed)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    subprocess.run(
        [sys.executable, "-m", "slurm_gavel", *SIMULATE, "--json", str(plain)],
        cwd=ROOT, capture_output=True, check=True,
    )  # fmt: skip
    assert _summary(timed) == _summary(plain)

    bands = re.findall(
        r"^\s*(\d+)-(\d*)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.e+-]+)", r.stdout, re.M
    )
    assert bands, r.stdout
    # one line per LP size band, and every re-solve of the run counted once
    assert sum(int(b[2]) for b in bands) == json.loads(timed.read_text())["reallocations"]
    assert any(int(b[0]) >= 1000 for b in bands), "no LP above the threshold: the case changed"
    for _lo, _hi, _n, highs_ms, dw_ms, dx in bands:
        assert float(highs_ms) > 0 and float(dw_ms) > 0
        assert float(dx) < 1e-6  # the same optimum (both are exact)


def test_without_a_command_it_says_how_to_call_it():
    r = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    assert "bench_dw_threshold.py --" in r.stderr
