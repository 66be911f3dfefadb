"""benchmarks/bench_allocate.py --json says which path the policy's LPs took: the
decomposition (certified), the plain LP, or a fallback from one to the other with its
reason."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_allocate.py"


def _bench(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--policy", "max_min_fairness", "--jitter", "0.2",
         "--repeats", "2", *args],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if "--json" in args else {"text": r.stdout}


def test_json_names_the_decomposition_and_the_plain_lp() -> None:
    # 600 distinct jobs: ~1,800 class-type columns, above mm_lp.DW_MIN_COLUMNS
    big = _bench("--jobs", "600", "--gpus-per-type", "150", "--json")["fast"]
    assert big["lp_path"] == ["decomposition", "decomposition"]
    assert big["decomposed"] == ["max_min"] and big["fallbacks"] == []
    small = _bench("--jobs", "40", "--gpus-per-type", "10", "--json")["fast"]
    assert small["lp_path"] == ["plain LP", "plain LP"]
    assert small["decomposed"] == [] and small["fallbacks"] == []
    text = _bench("--jobs", "600", "--gpus-per-type", "150")["text"]
    assert "LP path decomposition (max_min); fallbacks: none" in text


def test_json_lists_every_fallback_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker (the child's code) in this process, with every Lagrangian bound past
    the primal value: each call falls back, and says why."""
    from slurm_gavel.policies.solvers import dw

    spec = importlib.util.spec_from_file_location("bench_allocate", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    real = dw._bound
    monkeypatch.setattr(dw, "_bound", lambda *args: real(*args) * (1 + 1e-6))
    args = argparse.Namespace(
        policy="max_min_fairness", jobs=600, gpus_per_type=150, seed=0, pairs=False,
        weights="1", accounts="", jitter=0.2, prices="", worker="fast", repeats=2,
        exact_check=False,
    )  # fmt: skip
    out = bench.worker(args)
    assert out["lp_path"] == ["fallback", "fallback"]
    assert out["decomposed"] == []
    assert [(f["call"], f["lp"], f["reason"]) for f in out["fallbacks"]] == [
        (0, "max_min", "bound_crosses_primal"),
        (1, "max_min", "bound_crosses_primal"),
    ]
    assert all("dual bound" in f["detail"] for f in out["fallbacks"])
    json.dumps(out)  # what the child prints
    line = bench.format_result(args, {"fast": {**out, "peak_rss_mib": 1.0}})
    assert "LP path fallback; fallbacks: call 0 max_min (bound_crosses_primal)" in line
