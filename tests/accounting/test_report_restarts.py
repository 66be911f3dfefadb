"""`report`: restarts per job and GPU-hours lost to restarts."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from sacct_runs import sacct_run

from slurm_gavel.accounting.usage_report import job_facts, summarise
from slurm_gavel.cli import main
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
DATA = Path(__file__).parents[1] / "data" / "sacct"


# job 1 runs on 2 GPUs unless a test says otherwise
run = partial(sacct_run, gpus={"v100": 2}, gpu_total=2)


def _runs():
    # job 1: two runs (one requeue) on 2 GPUs; job 2: one run on 1 GPU
    return [
        run(job_id="1", state="REQUEUED"),
        run(job_id="1"),
        run(job_id="2", gpus={"v100": 1}, gpu_total=1),
    ]


def test_lost_gpu_hours_are_restarts_x_cost_x_gpus_with_the_measured_cost_first():
    facts = job_facts(_runs(), TABLE, None, {"1": 90.0}, 300.0)
    (everyone,) = summarise(facts, None)
    assert everyone["restarts"] == 1 and everyone["restarts_per_job"] == 0.5
    assert everyone["restart_gpu_hours"] == pytest.approx(1 * 90.0 * 2 / 3600, abs=1e-4)
    facts = job_facts(_runs(), TABLE, {"2": 2}, None, 300.0)
    (everyone,) = summarise(facts, None)
    assert everyone["restarts_per_job"] == 1.5
    assert everyone["restart_gpu_hours"] == pytest.approx((300 * 2 + 2 * 300 * 1) / 3600, abs=1e-4)


def test_without_a_known_cost_the_lost_gpu_hours_are_unknown_not_zero():
    (everyone,) = summarise(job_facts(_runs(), TABLE), None)
    assert everyone["restart_gpu_hours"] is None
    # jobs that never restarted lose nothing, whatever their cost
    (nobody,) = summarise(job_facts([run(job_id="3")], TABLE), None)
    assert nobody["restart_gpu_hours"] == 0.0


def test_the_command_takes_restart_seconds_and_refuses_nonsense(tmp_path, capsys):
    src = str(DATA / "24.11" / "sacct.json")
    cap = ["--capacity", "v100=2,p100=2,k80=2"]
    assert main(["report", "--input", src, "--json", "-", "--restart-seconds", "120", *cap]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["groups"]
    assert row["restart_gpu_hours"] > 0 and row["restarts_per_job"] > 0
    assert main(["report", "--input", src, *cap]) == 0
    out = capsys.readouterr().out
    assert "PER JOB" in out.splitlines()[0] and "LOST GPU-h" in out.splitlines()[0]
    for bad in ("-5", "nan", "inf"):
        assert main(["report", "--input", src, "--restart-seconds", bad, *cap]) == 2
        assert "--restart-seconds" in capsys.readouterr().err
