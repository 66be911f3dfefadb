"""benchmarks/bench_liars.py on a reduced grid: with no start-up allowance no rate lie
gains the liar anything or costs the honest jobs anything (the 2 % bound with nothing
to spare); the bound check and the script's --json output are what they say."""

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


def row(
    kind: str, lie: str, liar: float | None, honest: float | None, failed: int = 0
) -> dict[str, object]:
    """One policy/kind/lie line of the script's "worst" list."""
    return {"policy": "p", "kind": kind, "lie": lie, "liar_jct_ratio": liar,
            "honest_jct_ratio": honest, "failed": failed}  # fmt: skip


RATE_LIES = ["10x-all", "0.1x-all", "10x-v100", "10x-k80", "drip", "1.1x-all", "no-rate", "garbage"]


@pytest.mark.slow
@pytest.mark.hostile
@pytest.mark.parametrize("allowance", [None, 0.0])
def test_no_rate_report_buys_anything(allowance):
    # A cell is what the job's steps show, whatever it reports, with the default
    # start-up allowance (None) as with none: every rate lie must leave the schedule
    # exactly as honesty does, so the 2 % bound holds with nothing to spare, under the
    # policies that plan finishing times from the level (where a uniform 10x lie bought
    # 25 % of JCT when the first report set an untyped job's level, and 16 % when a
    # report could still take the top of its progress range) and min cost, which sums
    # steps.
    bench = _bench()
    out = bench.grid(
        ["finish_time_fairness", "min_total_duration", "min_cost"],
        ["untyped", "typed"],
        RATE_LIES,
        [0],
        jobs=6,
        hours=1.5,
        allowance=allowance,
    )
    assert len(out["worst"]) == 3 * 2 * len(RATE_LIES)
    assert bench.within(out["worst"]) == []
    for w in out["worst"]:
        assert (w["liar_jct_ratio"], w["honest_jct_ratio"]) == (1.0, 1.0), w


def test_the_bound_check_names_what_breaks_it():
    bench = _bench()
    worst = [
        row("untyped", "a", 0.97, 1.0),
        row("typed", "b", 1.5, 1.03),
        row("typed", "c", None, None, failed=2),
        row("typed", "d", 0.99, 1.01),
    ]
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


def test_a_miss_within_the_controls_own_move_is_told_apart():
    bench = _bench()
    worst = [
        row("typed", "jitter", 0.90, 1.01),
        row("typed", "a", 0.95, 1.0),
        row("typed", "b", 0.85, 1.0),
        row("untyped", "a", 0.97, 1.0),
        row("typed", "c", None, None, failed=1),
    ]
    assert bench.control_noise(worst) == {("p", "typed"): pytest.approx(0.10)}
    # every miss still misses the bound; only those beyond the control are a lie's
    assert len(bench.within(worst)) == 5
    assert bench.beyond_control(worst) == [
        "p/typed/b: liar's JCT x0.850",
        "p/untyped/a: liar's JCT x0.970",
        "p/typed/c: 1 run(s) failed",
    ]
