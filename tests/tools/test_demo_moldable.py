"""The demo's moldable form (tools/demo --moldable): its options, what it reads
of each run's GPU count (the emulation line, the daemon's state), how it shows it, and
the simulator form's comparison (--simulate --moldable, run for real: seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from demo_dir import demo_run_dir

from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev.demo_options import parse_args
from slurm_gavel_dev.demo_slurm import daemon_round

REPO = Path(__file__).resolve().parents[2]
LINE = (
    "[slurm-gavel emulate] restart {r} node {n} gpu {g}: ResNet-50 (batch size 64){on} at "
    "7.92 steps/s = table 7.92 x 1 [speed emulated; GPU type from Gres=gpu:{g}:2 of node {n}]"
)


def test_moldable_defaults_and_refusals(capsys) -> None:
    a = parse_args(["--moldable"])
    assert a.moldable == "1-2" and a.jobs == rep.MOLDABLE_JOBS
    assert all(j.job_type for j in rep.parse_jobs(a.jobs))
    assert parse_args(["--moldable", "2-4", "--jobs", "A3C=5"]).jobs == "A3C=5"
    assert parse_args([]).moldable is None and parse_args([]).jobs == rep.DEFAULT_JOBS
    for bad in ("3", "4-2", "1-2;rm -rf /", "0-2", "1-2000"):
        with pytest.raises(SystemExit):
            parse_args(["--moldable", bad])
        assert "--moldable" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--moldable", "--policy", "max_min_fairness_packed"])
    assert "packed policy" in capsys.readouterr().err


def test_each_runs_count_is_read_from_its_emulation_line() -> None:
    text = "\n".join([
        LINE.format(r=0, n="k80-1", g="k80", on=""),
        LINE.format(r=1, n="v100-1", g="v100", on=" on 2 GPUs"),
        LINE.format(r=2, n="v100-2", g="v100", on=" on 2 GPUs"),
    ])  # fmt: skip
    run = rep.parse_output(text)
    assert run.gpus == ["k80", "v100", "v100"] and run.counts == [1, 2, 2]
    assert rep.gpu_path(run.gpus, run.counts) == "k80>v100x2"
    assert rep.gpu_path(["v100", "v100"], [1, 2]) == "v100>v100x2"  # the count changed
    assert rep.gpu_path(run.gpus) == "k80>v100"  # rigid callers: as before


def test_progress_line_names_counts_above_one() -> None:
    states = {"1": "RUNNING", "2": "RUNNING"}
    labels = {"1": "r50-1", "2": "tfm-2"}
    line = rep.progress_line(2, 30.0, states, {"1": "v100", "2": "v100"}, labels, {"1": 2})
    assert line.endswith("| v100: r50-1x2 tfm-2")


def test_daemon_round_reads_each_placed_jobs_gpus(tmp_path: Path) -> None:
    doc = {"scheduler": {"round_index": 4}, "jobs": {
        "1": {"state": "running", "gpu_type": "v100", "nodes": [["v100-1", 2]]},
        "2": {"state": "starting", "gpu_type": "p100", "nodes": [["p100-1", 1], ["p100-2", 1]]},
        "3": {"state": "held", "gpu_type": None, "nodes": []},
    }}  # fmt: skip
    f = tmp_path / "state.json"
    f.write_text(json.dumps(doc))
    assert daemon_round(f) == (4, {"1": "v100", "2": "p100"}, {"1": 2, "2": 2})
    assert daemon_round(tmp_path / "none.json") == (None, {}, {})


# Slow (full tier only: tools/test --help): two whole simulations, 34 s.
@pytest.mark.slow
def test_simulate_moldable_compares_rigid_and_moldable(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gavel_dev.demo", "--simulate", "--moldable",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    rigid = json.loads((tmp_path / "plots" / "summary.json").read_text())
    mold = json.loads((tmp_path / "plots" / "summary-moldable.json").read_text())
    mmf = next(r for r in rigid if r["policy"] == "max_min_fairness")
    want = (
        f"  max_min_fairness average JCT {mmf['avg_jct_s'] / 3600:.2f} h rigid -> "
        f"{mold['avg_jct_s'] / 3600:.2f} h moldable"
    )
    assert want in res.stdout
    assert "(re)starts by GPU count: " in res.stdout
    starts = mold["moldable"]["starts_by_count"]
    assert any(c != "1" for c in starts) and sum(starts.values()) > 0
    # the plain simulator form is unchanged: no moldable run
    plain = subprocess.run(
        [sys.executable, "-m", "slurm_gavel_dev.demo", "--simulate", "--dir", str(tmp_path / "p")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert plain.returncode == 0 and "[demo] moldable" not in plain.stdout
    assert not (tmp_path / "p" / "plots" / "summary-moldable.json").exists()


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.torch
def test_moldable_demo_end_to_end(tmp_path: Path) -> None:
    """tools/demo --moldable on its own cluster (the default 6 GPUs, 4 jobs of range 1-2):
    two jobs grow to 2 GPUs at the start (the table's rows at 2 beat 1 on every type),
    every job completes, and the table names each run's count."""
    run = demo_run_dir(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gavel_dev.demo", "--moldable", "--no-baseline",
         "--dir", str(run), "--round-seconds", "15", "--timeout", "240"],
        capture_output=True, text=True, cwd=REPO, timeout=420,
    )  # fmt: skip
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    results = json.loads((run / "results.json").read_text())
    counts = [c for row in results["jobs"] for c in row["gavel"]["gpu_counts"]]
    assert all(row["gavel"]["state"] == "COMPLETED" for row in results["jobs"]), results
    assert counts.count(2) >= 2 and set(counts) <= {1, 2}, counts
    assert "x2" in res.stdout  # the progress lines and the final table name the count
