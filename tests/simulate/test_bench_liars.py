"""benchmarks/bench_liars.py on a reduced grid: no lie gains the liar more than 2% of
its JCT or costs the honest jobs more than 2% of theirs, worst seed, with the daemon's
trust bounds; and the script's --json output is what it says."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_liars.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_liars", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.hostile
def test_no_lie_pays_more_than_two_percent_where_the_level_decides():
    # The policies that plan with remaining steps over rate, where a job's claimed
    # level is what a lie could buy (a uniform 10x lie bought 25% under finish-time
    # fairness when the first report set an untyped job's level), and the lies that
    # aim at the level.
    bench = _bench()
    out = bench.grid(
        ["finish_time_fairness", "min_total_duration"],
        ["untyped", "typed"],
        ["10x-all", "0.1x-all", "drip", "garbage"],
        [0],
        jobs=8,
        hours=2.0,
    )
    assert len(out["worst"]) == 2 * 2 * 4
    assert bench.within(out["worst"]) == []


def test_the_bound_check_names_what_breaks_it():
    bench = _bench()
    worst = [
        {"policy": "p", "kind": "untyped", "lie": "a", "liar_jct_ratio": 0.97,
         "honest_jct_ratio": 1.0, "failed": 0},
        {"policy": "p", "kind": "typed", "lie": "b", "liar_jct_ratio": 1.5,
         "honest_jct_ratio": 1.03, "failed": 0},
        {"policy": "p", "kind": "typed", "lie": "c", "liar_jct_ratio": None,
         "honest_jct_ratio": None, "failed": 2},
        {"policy": "p", "kind": "typed", "lie": "d", "liar_jct_ratio": 0.99,
         "honest_jct_ratio": 1.01, "failed": 0},
    ]  # fmt: skip
    assert bench.within(worst) == [
        "p/untyped/a: liar's JCT x0.970",
        "p/typed/b: honest jobs' JCT x1.030",
        "p/typed/c: 2 run(s) failed",
    ]


def test_the_script_writes_every_run_and_the_worst_seed_as_json():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--policies", "max_min_fairness", "--kinds", "typed",
         "--lies", "10x-k80,nothing", "--seeds", "0,1", "--jobs", "6", "--hours", "1",
         "--json"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [(x["lie"], x["seed"]) for x in out["runs"]] == [
        ("10x-k80", 0),
        ("10x-k80", 1),
        ("nothing", 0),
        ("nothing", 1),
    ]
    for w in out["worst"]:
        runs = [x for x in out["runs"] if x["lie"] == w["lie"]]
        assert w["liar_jct_ratio"] == min(x["liar_jct_ratio"] for x in runs)
        assert w["honest_jct_ratio"] == max(x["honest_jct_ratio"] for x in runs)
    assert out["setup"]["jobs"] == 6 and "beyond_2_percent" in out
