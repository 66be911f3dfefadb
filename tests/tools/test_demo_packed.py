"""The demo with a packed policy (slurm_gavel_dev/demo_packed.py): its defaults, which jobs
shared a GPU from the jobs' output, the simulator trace and prediction, the table."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from slurm_gavel.domain.throughputs import load_table
from slurm_gavel_dev import demo, demo_packed
from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev.demo_report import JobRun, Outcome

PAIR_LINE = "[slurm-gavel emulate] job {} paired with job {} (A3C) on v100: 2.95 steps/s = ..."


def test_packed_policy_gets_its_job_set_shards_and_the_unpacked_comparison(monkeypatch):
    seen = {}

    class Fake:
        def __init__(self, args, jobs):
            seen["args"], seen["jobs"] = args, jobs
            self.run_dir = args.dir

        def run(self):
            return 0

        def stop_daemon(self):
            pass

    monkeypatch.setattr(demo, "Demo", Fake)
    monkeypatch.setattr("slurm_gavel_dev.localcluster.down", lambda d: None)
    assert demo.main(["--policy", "max_min_fairness_packed", "--dir", "/nonexistent"]) == 0
    a = seen["args"]
    assert a.compare_policy == "max_min_fairness"
    assert a.topology == demo_packed.PACKED_TOPOLOGY and a.jobs == demo_packed.PACKED_JOBS
    demo.main(["--policy", "gandiva", "--compare-policy", "none", "--dir", "/x"])
    assert seen["args"].compare_policy is None
    demo.main(["--dir", "/x"])  # the unpacked demo as before
    assert seen["args"].compare_policy is None and seen["args"].jobs == rep.DEFAULT_JOBS
    assert seen["args"].topology == rep.DEFAULT_TOPOLOGY


def test_packed_job_set_has_pairs_that_beat_time_sharing_on_some_gpu():
    t = load_table()
    jobs = rep.parse_jobs(demo_packed.PACKED_JOBS)
    gpus = sum(int(x.split(":")[1].split("x")[1]) for x in demo_packed.PACKED_TOPOLOGY.split(","))
    assert len(jobs) > gpus
    best = max(
        a / t.row(j.job_type, 1)[g] + b / t.row(k.job_type, 1)[g]
        for j in jobs
        for k in jobs
        for g in ("v100", "p100", "k80")
        if (cell := t.pair(j.job_type, k.job_type, 1, g)) is not None
        for a, b in [cell]
    )
    assert best > 1.3


def test_partners_come_from_the_jobs_pair_lines_each_once():
    text = "\n".join([
        "[slurm-gavel emulate] restart 0 node v100-1 gpu v100: A3C at 7.18 steps/s = ...",
        PAIR_LINE.format(5, 7),
        "[slurm-gavel emulate] job 5 alone on its GPU: 7.18 steps/s",
        PAIR_LINE.format(5, 7),
        PAIR_LINE.format(5, 9),
        "[slurm-gavel emulate] job 5 shares its GPU with job 3, not a managed job ...",
        "x [slurm-gavel emulate] job 5 paired with job 4 (A3C)",  # not at a line start
    ])  # fmt: skip
    run = rep.parse_output(text)
    assert run.partners == ["7", "9"] and run.gpus == ["v100"]
    outs = [Outcome("5", run=run), Outcome("7"), Outcome("9", run=JobRun(partners=["5"]))]
    assert demo_packed.shared_with(outs, ["a3c-1", "r50-2", "rec-3"]) == [
        "r50-2,rec-3",
        "-",
        "a3c-1",
    ]


def test_trace_csv_is_the_job_set_at_its_submission_times():
    jobs = rep.parse_jobs("A3C=40;ResNet-50 (batch size 64)=24")
    rows = list(csv.DictReader(io.StringIO(demo_packed.trace_csv(jobs, [100.5, 101.0]))))
    assert [(r["arrival_time"], r["job_type"], r["total_steps"]) for r in rows] == [
        ("0.000", "A3C", "40"),
        ("0.500", "ResNet-50 (batch size 64)", "24"),
    ]


def test_prediction_runs_the_simulator_on_the_same_job_set(tmp_path: Path):
    jobs = rep.parse_jobs("A3C=40;Recommendation (batch size 2048)=80;A3C=40")
    (tmp_path / "trace.csv").write_text(demo_packed.trace_csv(jobs, [0.0, 0.1, 0.2]))
    table = tmp_path / "table.json"
    table.write_text(json.dumps(rep.scaled_table(load_table().to_json(), 1.0)))
    got = demo_packed.predict(
        tmp_path / "trace.csv",
        table,
        "v100:1x1",
        ["max_min_fairness_packed", "max_min_fairness"],
        30.0,
        tmp_path / "sim.json",
    )
    assert set(got) == {"max_min_fairness_packed", "max_min_fairness"}
    assert all(v > 0 for v in got.values())


def _o(job_id: str, jct: float, partners=(), state="COMPLETED") -> Outcome:
    return Outcome(job_id, state, 0.0, jct, 1, JobRun(gpus=["v100"], partners=list(partners)))


def test_final_table_says_who_shared_and_puts_the_prediction_beside_the_runs():
    jobs = rep.parse_jobs("A3C=40;Recommendation (batch size 2048)=80;A3C=40")
    packed = [_o("1", 60, ["2"]), _o("2", 90, ["1"]), _o("3", 30)]
    unpacked = [_o("4", 80), _o("5", 100), _o("6", 120, state="CANCELLED")]
    slurm = [_o("7", 50), _o("8", 70), _o("9", 90)]
    pred = {"max_min_fairness_packed": 55.4, "max_min_fairness": 71.0, "slurm_fifo": 66.0}
    text = demo_packed.final_table(
        jobs, packed, unpacked, slurm, "max_min_fairness_packed", "max_min_fairness", pred
    )
    rows = text.splitlines()
    assert "shared GPU with" in rows[0]
    assert "rec-2" in rows[2] and "a3c-1" in rows[3] and rows[4].split()[5] == "-"
    assert "CANCELLED" in rows[4]
    assert "gavel (max_min_fairness_packed): average JCT 60 s; simulator predicts 55 s" in text
    assert "gavel (max_min_fairness): average JCT 100 s; simulator predicts 71 s" in text
    assert "Slurm alone (FIFO, type-blind): average JCT 70 s; simulator predicts 66 s" in text
    assert "2 of 3 jobs shared a GPU" in text
    res = demo_packed.results_json(jobs, unpacked, packed)
    assert res["shared_gpu_with"] == {"a3c-1": "rec-2", "rec-2": "a3c-1", "a3c-3": "-"}
    assert res["unpacked"]["a3c-3"]["state"] == "CANCELLED"
    assert res["unpacked"]["a3c-3"]["restarts"] == 1 and res["unpacked"]["rec-2"]["jct_s"] == 100


@pytest.mark.parametrize(
    "policy,want",
    [("max_min_fairness_packed", "max_min_fairness"), ("gandiva", "max_min_fairness")],
)
def test_unpacked_of(policy, want):
    assert demo_packed.packs(policy) and demo_packed.unpacked_of(policy) == want
