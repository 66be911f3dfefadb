"""The demo (tools/demo, slurm_gavel_dev/demo.py): its pure parts, and one end-to-end run on
the real local Slurm cluster with a small job set (marked slurm and slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from demo_dir import demo_run_dir

from slurm_gavel.daemon.config import load_config
from slurm_gavel.domain.throughputs import load_table, table_from_json
from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev.demo_report import JobRun, Outcome

REPO = Path(__file__).resolve().parents[2]


def test_parse_jobs_labels_scripts_and_errors() -> None:
    jobs = rep.parse_jobs("ResNet-50 (batch size 64)=10; A3C=5;Recommendation (batch size 512)=7")
    assert [(j.label, j.script, j.steps) for j in jobs] == [
        ("r50-1", "resnet50", 10),
        ("a3c-2", "a3c", 5),
        ("rec-3", "recommendation", 7),
    ]
    assert jobs[0].job_type == "ResNet-50 (batch size 64)"
    for bad, why in [
        ("A3C", "TYPE=STEPS"),
        ("A3C=0", "TYPE=STEPS"),
        ("VGG-16=5", "reference"),
        ("", "no job"),
    ]:
        with pytest.raises(ValueError, match=why):
            rep.parse_jobs(bad)


def test_default_jobs_are_types_of_the_shipped_table_with_a_script() -> None:
    table = load_table()
    for j in rep.parse_jobs(rep.DEFAULT_JOBS):
        assert table.has(j.job_type, 1)
        assert (REPO / "workloads" / "sbatch" / f"{j.script}.sbatch").exists()


def test_scaled_table_multiplies_every_figure_and_stays_valid() -> None:
    table = load_table()
    scaled = table_from_json(rep.scaled_table(table.to_json(), 0.5))
    jt = "ResNet-50 (batch size 64)"
    assert scaled.row(jt, 1)["v100"] == pytest.approx(table.row(jt, 1)["v100"] / 2)
    a, b, sf = next(iter(table.pairs))
    gpu = next(iter(table.pairs[(a, b, sf)]))
    assert scaled.pairs[(a, b, sf)][gpu][0] == pytest.approx(table.pairs[(a, b, sf)][gpu][0] / 2)


def test_daemon_config_passes_the_daemons_validator(tmp_path: Path) -> None:
    (tmp_path / "table.json").write_text(json.dumps(load_table().to_json()))
    text = rep.daemon_config(
        policy="max_min_fairness",
        round_seconds=20,
        state_dir=str(tmp_path / "state"),
        progress_dir=str(tmp_path / "progress"),
        table=str(tmp_path / "table.json"),
        grace_seconds=10,
        stay_credit_seconds=60,
    )
    assert yaml.safe_load(text)["partitions"] == ["gpu"]
    cfg_path = tmp_path / "gavel.yaml"
    cfg_path.write_text(text)
    cfg = load_config(cfg_path)
    assert cfg.settings.round_seconds == 20 and cfg.policy == "max_min_fairness"
    assert cfg.plugins.mechanism.stay_credit_seconds == 60


def test_baseline_script_drops_only_the_gavel_lines() -> None:
    text = (REPO / "workloads" / "sbatch" / "resnet50.sbatch").read_text()
    plain = rep.baseline_script(text)
    assert "--gavel-" not in "".join(ln for ln in plain.splitlines() if ln.startswith("#SBATCH"))
    assert "#SBATCH --gpus=1" in plain and "exec " in plain
    assert len(plain.splitlines()) == len(text.splitlines()) - 2


def test_parse_output_reads_the_gpu_of_each_run_and_the_summary() -> None:
    text = "\n".join([
        "[2026-01-01T10:00:00+00:00] 7 restart 0 on vm",
        "[slurm-gavel emulate] restart 0 node k80-1 gpu k80: A3C at 3.44 steps/s = ...",
        "[slurm-gavel] checkpoint /x/ckpt-000000000005.pt at step 5; exiting 99",
        "[slurm-gavel emulate] restart 1 node v100-2 gpu v100: A3C at 7.18 steps/s = ...",
        "[slurm-gavel emulate] restart 2 node v100-1 gpu v100: A3C at 7.18 steps/s = ...",
        '{"job_type": "A3C", "steps": 20, "emulation_behind_s": 0.25}',
    ])  # fmt: skip
    run = rep.parse_output(text)
    assert run.gpus == ["k80", "v100", "v100"] and run.nodes[1] == "v100-2"
    assert run.finished and run.behind_s == 0.25
    assert rep.gpu_path(run.gpus) == "k80>v100" and rep.gpu_path([]) == "-"
    assert not rep.parse_output("[slurm-gavel emulate] garbage").gpus


def test_progress_line() -> None:
    states = {"1": "RUNNING", "2": "COMPLETED", "3": "PENDING", "4": "RUNNING"}
    labels = {"1": "r50-1", "2": "rec-2", "3": "a3c-3", "4": "gan-4"}
    line = rep.progress_line(3, 41.2, states, {"1": "v100", "4": "k80", "2": "p100"}, labels)
    assert line == "round   3    41s  done 1/4 running 2 pending 1 | v100: r50-1 | k80: gan-4"


def _outcome(jct: float, gpus: list[str], restarts: int = 0, state: str = "COMPLETED") -> Outcome:
    return Outcome("1", state, 1000.0, 1000.0 + jct, restarts, JobRun(gpus=gpus))


def test_final_table_rows_averages_and_ratio() -> None:
    jobs = rep.parse_jobs("ResNet-50 (batch size 64)=10;Recommendation (batch size 2048)=10")
    gavel = [_outcome(30, ["p100", "v100"], 1), _outcome(50, ["p100"])]
    slurm = [_outcome(90, ["k80"]), _outcome(50, ["v100"])]
    text = rep.final_table(jobs, gavel, slurm, "max_min_fairness")
    rows = text.splitlines()
    assert "p100>v100" in rows[2] and rows[2].split()[-4] == "1"  # restarts
    assert rows[2].split()[-1] == "90" and rows[3].split()[-1] == "50"
    assert "average JCT 40 s, last job done after 50 s, 1 restarts" in text
    assert "average JCT 70 s, last job done after 90 s" in text
    assert "average JCT x0.57, makespan x0.56" in text
    res = rep.results_json(jobs, gavel, slurm)
    assert res["jobs"][0]["gavel"]["gpu_types"] == ["p100", "v100"]
    assert res["jobs"][1]["slurm_alone"]["jct_s"] == 50
    unfinished = rep.final_table(
        jobs, [_outcome(30, []), Outcome("2", "CANCELLED", 0.0)], None, "fifo"
    )
    assert "CANCELLED" in unfinished and "average JCT - s" in unfinished


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.torch
def test_demo_end_to_end(tmp_path: Path) -> None:
    """tools/demo's Python side on its own small cluster: both phases, the final table."""
    run = demo_run_dir(tmp_path)
    jobs = "ResNet-50 (batch size 64)=24;Recommendation (batch size 2048)=80;A3C=40"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_gavel_dev.demo",
            "--dir",
            str(run),
            "--jobs",
            jobs,
            "--topology",
            "v100:1x1,p100:1x1,k80:1x1",
            "--round-seconds",
            "15",
            "--speed",
            "2",
            "--timeout",
            "150",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=420,
    )
    out = res.stdout
    assert res.returncode == 0, f"{out[-3000:]}\n{res.stderr[-3000:]}"
    assert "round" in out and "Speeds are emulated" in out
    assert "Slurm alone (FIFO, type-blind): average JCT" in out
    assert "stopped the daemon and the cluster" in out
    results = json.loads((run / "results.json").read_text())
    assert len(results["jobs"]) == 3
    for row in results["jobs"]:
        assert row["job_type"]
        for phase in ("gavel", "slurm_alone"):
            assert row[phase]["state"] == "COMPLETED", row
            assert row[phase]["jct_s"] > 0 and row[phase]["gpu_types"], row
    assert not (run / "cluster.json").exists()  # the cluster was stopped
