"""benchmarks/restart_neighbourhood.py: the sweep the restart-aware figures are
judged by (EXPERIMENTS.md, "Where it stands") runs, resumes and counts what it says."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "restart_neighbourhood.py"
CLUSTER = "v100:1x2,p100:1x2,k80:1x2"


def _module():
    spec = importlib.util.spec_from_file_location("restart_neighbourhood", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "small.csv"
    cmd = [sys.executable, "-m", "slurm_gavel", "simulate", "--generate", "24", "--seed", "3"]
    cmd += ["--interarrival", "600", "--cluster", CLUSTER, "--policy", "max_min_fairness"]
    cmd += ["--save-trace", str(path), "--no-progress"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return path


def _sweep(out: Path, trace: Path, *more: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), str(out), "--window", "small", str(trace), CLUSTER]
    cmd += ["--costs", "300", "--budgets", "0.1", "0.3", "-j", "2", *more]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_sweep_counts_runs_over_the_target_from_the_summaries(tmp_path, trace):
    out = tmp_path / "nb"
    r = _sweep(out, trace)
    assert r.returncode == 0, r.stderr
    ref = json.loads((out / "gavel-free" / "small.json").read_text())
    assert ref["restart_gpu_hours"] == 0.0  # Gavel's restarts are free there
    judged = json.loads((out / "summary.json").read_text())["300"]["small"]
    over, lost = 0, 0.0
    for b, run in zip(("0.1", "0.3"), judged["runs"], strict=True):
        s = json.loads((out / f"300-{b}" / "small.json").read_text())
        assert run["budget"] == b
        assert run["jct"] == pytest.approx(s["avg_jct_s"] / ref["avg_jct_s"])
        assert run["makespan"] == pytest.approx(s["makespan_s"] / ref["makespan_s"])
        bad = (
            s["avg_jct_s"] > 1.03 * ref["avg_jct_s"]
            or s["makespan_s"] > ref["makespan_s"]
            or s["preemptions"] > 0.5 * ref["preemptions"]
        )
        assert run["over"] == bad
        over += bad
        lost += s["restart_gpu_hours"]
    assert judged["over"] == over
    assert judged["gpu_h_lost"] == pytest.approx(lost)
    assert f"{over} of 2 over" in r.stdout
    assert "| small |" in r.stdout


def test_sweep_resumes_and_compares(tmp_path, trace):
    out = tmp_path / "nb"
    assert _sweep(out, trace).returncode == 0
    first = (out / "300-0.1" / "small.json").stat().st_mtime_ns
    again = _sweep(out, trace, "--compare", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "300-0.1" / "small.json").stat().st_mtime_ns == first  # not run again
    header = next(line for line in again.stdout.splitlines() if line.startswith("| window"))
    assert header.count("nb: at 0.1") == 2  # the earlier OUT beside this one


def test_a_failing_simulation_is_reported_and_leaves_no_summary(tmp_path, trace):
    out = tmp_path / "nb"
    r = _sweep(out, trace, "--flags=--no-such-flag")
    assert r.returncode == 1
    assert "FAILED:" in r.stderr and "--no-such-flag" in r.stderr
    assert not (out / "300-0.1" / "small.json").exists()
    assert not (out / "summary.json").exists()


def test_at_default_marks_a_run_over_the_target():
    mod = _module()
    runs = [{"budget": "0.1", "jct": 1.05, "restarts": 0.2, "makespan": 0.99, "over": True}]
    assert mod.at_default({"runs": runs}) == "**1.050x / 0.20x / 0.9900x**"
    assert mod.at_default({"runs": [{**runs[0], "budget": "0.2"}]}) == "-"


def test_an_out_of_another_sweep_is_refused_not_mixed(tmp_path, trace):
    out = tmp_path / "nb"
    assert _sweep(out, trace).returncode == 0
    r = _sweep(out, trace, "--flags=--restart-budget 0.2")
    assert r.returncode == 2
    assert "holds a sweep of other code or flags" in r.stderr and "use a new OUT" in r.stderr
    assert "flags '' -> '--restart-budget 0.2'" in r.stderr


def test_judge_counts_each_part_of_the_target_and_only_those(tmp_path):
    """The generated trace above is over the target at both budgets; here each part of
    the target is crossed alone, and one run is within it."""
    mod = _module()

    def summary(path: Path, jct: float, restarts: int, makespan: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"avg_jct_s": jct, "preemptions": restarts, "makespan_s": makespan}
        path.write_text(json.dumps({**doc, "restart_gpu_hours": 1.5}))

    summary(tmp_path / "gavel-free" / "w.json", 100.0, 100, 1000.0)
    runs = {"0.1": (103.0, 50, 1000.0), "0.2": (103.5, 10, 900.0),
            "0.3": (90.0, 51, 900.0), "0.4": (90.0, 10, 1000.5)}  # fmt: skip
    for b, figures in runs.items():
        summary(tmp_path / f"300-{b}" / "w.json", *figures)
    judged = mod.judge(tmp_path, ["w"], "300", list(runs))["w"]
    assert [r["over"] for r in judged["runs"]] == [False, True, True, True]
    assert judged["over"] == 3
    assert judged["gpu_h_lost"] == pytest.approx(6.0)
    assert judged["preemptions"] == 121
    assert judged["median_makespan"] == pytest.approx(0.95)
