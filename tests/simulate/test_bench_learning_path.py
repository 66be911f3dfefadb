"""benchmarks/bench_learning_path.py: the learning path's choices, measured through the
product's simulate() (EXPERIMENTS.md, "What learning costs")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_learning_path.py"


def _run(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--jobs", "150", *args],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_the_choices_reach_the_simulation():
    shipped = _run("--seed", "3")
    assert shipped["reset_accounting"] is False and shipped["avg_jct_h"] > 0
    # never re-solving for a row change re-solves less than the shipped rule
    never = _run("--seed", "3", "--misjudged", "100")
    assert never["reallocations"] < shipped["reallocations"]
    # the oracle does not learn: the learning constants change nothing there
    oracle = [
        _run("--seed", "3", "--knowledge", "oracle", *a) for a in ((), ("--misjudged", "100"))
    ]
    assert oracle[0]["avg_jct_h"] == oracle[1]["avg_jct_h"]
