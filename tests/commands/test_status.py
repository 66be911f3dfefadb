import copy
import json
import logging
import math
from dataclasses import replace

import pytest
from daemon_rounds import TYPES, run_daemon

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.cli import main
from slurm_gavel.core.estimate import Observation, update_table
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    """A state directory left by a daemon that ran three rounds and stopped."""
    d = tmp_path_factory.mktemp("gavel")
    jobs = [Job(str(i), TYPES[i % 3], 1 + (i == 3), total_steps=1e7) for i in range(1, 7)]
    jobs.append(Job("7", "Not A Table Type"))
    # table knowledge: job 7's type, unknown to the table, is skipped (with learned
    # knowledge, the default, it would run on an estimated row)
    daemon = run_daemon(d, jobs, learning={"knowledge": "table"})
    return d, daemon


def test_table_lists_every_managed_job(state_dir, capsys):
    d, daemon = state_dir
    assert main(["status", "--state-dir", str(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("daemon not running; round 3, policy max_min_fairness")
    assert out[1] == "usable GPUs: v100 2, k80 2"
    header = out[2].split()
    assert header[:8] == ["JOBID", "PARTITION", "USER", "ACCOUNT", "JOBTYPE", "GPUS", "STATE",
                          "TIME"]  # fmt: skip
    assert "ALLOC(v100/k80)" in header and header[-1] == "RESTARTS"
    table_end = out.index("why (slurm-gavel explain JOBID for the figures):")
    rows = {line.split()[0]: line for line in out[3:table_end]}
    assert sorted(rows, key=int) == [str(i) for i in range(1, 8)]
    assert " skipped " in rows["7"]
    assert (
        out[table_end + 1 :].count(
            "  7: not scheduled: its job type is not in the throughput table of the site"
        )
        == 1
    )
    placed = daemon.state.placement
    for job_id, p in placed.items():
        assert f" {p.gpu_type} " in rows[job_id] and f" {p.nodes[0].node}" in rows[job_id]
        kept = daemon.last_report and job_id in daemon.last_report.result.kept
        assert (" running " if kept else " starting ") in rows[job_id]


def test_json_matches_the_daemons_accounting(state_dir, capsys):
    d, daemon = state_dir
    assert main(["status", "--state-dir", str(d), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["round"] == 3 and view["daemon"]["alive_pid"] is None
    by_id = {j["id"]: j for j in view["jobs"]}
    for job_id, acct in daemon.state.jobs.items():
        assert by_id[job_id]["received_s"] == pytest.approx(acct.received_s)
        assert by_id[job_id]["allocation"] == pytest.approx(
            daemon.state.allocation.fractions.get(job_id, {})
        )
    assert by_id["3"]["scale_factor"] == 2
    # 2 rounds of 60 s credited on 4 GPUs
    assert by_id["7"]["state"] == "skipped" and "unknown job type" in by_id["7"]["reason"]
    total = sum(j["scale_factor"] * sum(j["received_s"].values()) for j in view["jobs"])
    assert total == pytest.approx(2 * 60 * 4)


def test_status_reads_through_the_config(state_dir, tmp_path, capsys):
    d, _ = state_dir
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text(f"partitions: [gpu]\nstate_dir: {d}\n")
    assert main(["status", "--config", str(cfg)]) == 0
    assert "round 3" in capsys.readouterr().out


def test_missing_state_is_one_clear_line(tmp_path, capsys):
    assert main(["status", "--state-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has not completed a round" in err and err.count("\n") == 1


# ---- day one: GPU types the throughput table lacks (cluster_rows.py) -------------------

RESNET, A3C = "ResNet-50 (batch size 64)", "A3C"


def _day_one_truth(table):
    """What the simulated a100/h100 nodes really do: 2x and 3x a V100."""
    truth = copy.deepcopy(table)
    for row in truth.alone.values():
        row["a100"], row["h100"] = 2 * row.get("v100", 0.0), 3 * row.get("v100", 0.0)
    return truth


@pytest.fixture
def day_one(tmp_path, caplog):
    """A daemon on a cluster of a100/h100 with the shipped v100/p100/k80 table."""
    table = load_table()
    truth = _day_one_truth(table)
    jobs = [Job(str(i), (RESNET, A3C)[i % 2], 1, total_steps=1e7) for i in range(1, 5)]
    sim = SimulatedCluster(parse_cluster_spec("a100:1x2,h100:1x2"), jobs, truth)
    cfg = parse_config(
        {
            "partitions": ["gpu"],
            "round_seconds": 60,
            "state_dir": str(tmp_path),
            "checkpoint": {"grace_seconds": 5},
        }
    )
    daemon = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    daemon.start()
    caplog.set_level("INFO", logger="slurm_gavel")
    # An earlier test's CLI call (logs.configure) stops slurm_gavel.* from propagating to
    # the root logger, where caplog listens: listen on the package's logger itself.
    pkg = logging.getLogger("slurm_gavel")
    propagate = pkg.propagate
    pkg.propagate = False
    pkg.addHandler(caplog.handler)
    yield tmp_path, daemon, sim
    pkg.removeHandler(caplog.handler)
    pkg.propagate = propagate
    daemon.store.release()


def _unmeasured_events(caplog):
    return [
        (f["job_type"], f["scale_factor"], f["gpu_type"], f["mark"])
        for r in caplog.records
        if getattr(r, "event", None) == "throughput_unmeasured"
        for f in [r.fields]
    ]


def test_day_one_every_job_runs_type_blind_and_status_says_so(day_one, caplog, capsys):
    d, daemon, sim = day_one
    for _ in range(2):
        report = daemon.round()
        sim.advance(sim.clock + 60)
    assert report.skipped == ()
    assert len(daemon.state.placement) == 4  # every job runs: 4 GPUs, 4 jobs
    # logged once per cell, not every round
    blind = {(jt, 1, t, "unmeasured: type-blind") for jt in (RESNET, A3C) for t in ("a100", "h100")}
    assert sorted(_unmeasured_events(caplog)) == sorted(blind)

    assert main(["status", "--state-dir", str(d), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    for j in view["jobs"]:
        assert j["unmeasured"] == {
            "a100": "unmeasured: type-blind",
            "h100": "unmeasured: type-blind",
        }
        assert j["state"] in ("running", "starting")
    assert main(["status", "--state-dir", str(d)]) == 0
    out = capsys.readouterr().out
    assert "unmeasured throughputs (type-blind" in out
    assert (
        f"  {A3C} x1: a100 unmeasured: type-blind, h100 unmeasured: type-blind (jobs 1, 3)" in out
    )


def test_day_one_marks_follow_the_measurements(day_one, caplog, capsys):
    """Once a job type is measured on a100 (the daemon's online update swaps its table),
    that cell is no longer marked and the other job types get an estimate there."""
    d, daemon, sim = day_one
    daemon.round()
    sim.advance(sim.clock + 60)
    learned = update_table(daemon.table, [Observation(RESNET, 1, "a100", 9.0)])
    daemon.sched_config = replace(daemon.sched_config, table=learned)
    report = daemon.round()
    cells = {(jt, t): mark for jt, _, t, mark in report.unmeasured}
    blind = "unmeasured: type-blind"
    assert cells == {(RESNET, "h100"): blind, (A3C, "a100"): "estimate", (A3C, "h100"): blind}
    assert (A3C, 1, "a100", "estimate") in _unmeasured_events(caplog)
    assert main(["status", "--state-dir", str(d), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    for j in view["jobs"]:
        assert j["unmeasured"] == {t: m for (k, t), m in cells.items() if k == j["job_type"]}


class _StepsUnknown:
    """The simulated cluster as Slurm reports it: no job's steps (the daemon estimates
    them from the time each job received and the table's figures)."""

    def __init__(self, sim):
        self.sim = sim

    def observe(self):
        snap = self.sim.observe()
        return replace(snap, jobs=tuple(replace(o, steps_done=None) for o in snap.jobs))

    def act(self, placement):
        return self.sim.act(placement)


def test_day_one_steps_of_silent_jobs_count_on_unmeasured_types(tmp_path, capsys):
    """Jobs without progress reports get steps from their time on a100/h100 at the
    type-blind figure, as on a measured type (finish-time policies read steps left)."""
    table = load_table()
    jobs = [Job(str(i), A3C, 1, total_steps=1e7) for i in range(1, 5)]
    sim = SimulatedCluster(parse_cluster_spec("a100:1x2,h100:1x2"), jobs, _day_one_truth(table))
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 60, "state_dir": str(tmp_path)})
    daemon = Daemon(cfg, _StepsUnknown(sim), table=table, metrics=DaemonMetrics())
    daemon.start()
    try:
        for _ in range(3):
            daemon.round()
            sim.advance(sim.clock + 60)
    finally:
        daemon.store.release()
    blind = math.exp(sum(math.log(v) for v in table.row(A3C, 1).values()) / 3)
    assert main(["status", "--state-dir", str(tmp_path), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    for j in view["jobs"]:
        assert sum(j["received_s"].values()) == pytest.approx(120.0)  # two rounds credited
        # estimated at the last round's observe, when one round (60 s) was credited
        assert j["steps_done"] == pytest.approx(60.0 * blind)
