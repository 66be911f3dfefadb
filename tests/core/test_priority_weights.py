"""Shares come from the admin: QOS weights, account weights, the cap on a user's weight.

The issue's reproduction: 20 one-GPU jobs on 4 V100 + 4 K80 under max_min_fairness;
one job claiming weight 1000 went from 0.2 V100 to a whole V100. With the cap it gets
what its honest twin gets; with a QOS weight from the admin it gets more.
"""

from __future__ import annotations

import logging

import pytest
from daemon_records import daemon_records

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.priority_weights import WeightsConfig, apply_weights, job_weight
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

ROUND = 60.0


@pytest.fixture(scope="module")
def table():
    return load_table()


def test_job_weight_is_qos_weight_times_the_capped_user_factor():
    w = WeightsConfig(max_user_weight=1.0, qos={"high": 4.0})
    assert job_weight(0.5, "high", w) == 2.0
    assert job_weight(1000.0, "high", w) == 4.0  # capped, then the admin's QOS weight
    assert job_weight(1000.0, None, w) == 1.0
    assert job_weight(0.25, "unknown-qos", w) == 0.25


def _daemon(tmp_path, table, jobs, policy="max_min_fairness", weights=None):
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4,k80:1x4"), jobs, table)
    doc = {
        "partitions": ["gpu"],
        "policy": policy,
        "round_seconds": ROUND,
        "checkpoint": {"grace_seconds": 5},
        "state_dir": str(tmp_path / "state"),
    }
    if weights is not None:
        doc["weights"] = weights
    d = Daemon(parse_config(doc), sim, table=table, metrics=DaemonMetrics())
    d.start()
    return d, sim


def _v100(d: Daemon, job: str) -> float:
    assert d.state.allocation is not None
    return d.state.allocation.fractions[job].get("v100", 0.0)


@pytest.fixture
def capped_log():
    with daemon_records(logging.WARNING) as records:
        yield lambda: [r for r in records if getattr(r, "event", None) == "weight_capped"]


@pytest.mark.hostile(guards="escalation")
def test_a_user_weight_of_1000_gets_no_more_than_its_honest_twin(tmp_path, table, capped_log):
    jobs = [Job(str(i), "ResNet-50 (batch size 64)", 1, total_steps=1e9) for i in range(20)]
    jobs[0] = Job("0", "ResNet-50 (batch size 64)", 1, priority_weight=1000.0, total_steps=1e9)
    d, sim = _daemon(tmp_path, table, jobs)
    try:
        for _ in range(3):
            d.round()
            sim.advance(sim.clock + ROUND)
    finally:
        d.store.release()
    assert _v100(d, "0") == pytest.approx(_v100(d, "1"), abs=1e-6)
    assert _v100(d, "0") < 0.5
    logged = capped_log()
    assert len(logged) == 1  # once, not every round
    assert logged[0].fields["job"] == "0" and logged[0].fields["cap"] == 1.0


def test_the_admins_qos_weight_raises_a_share(tmp_path, table):
    jobs = [
        Job(str(i), "ResNet-50 (batch size 64)", 1, total_steps=1e9, qos="normal")
        for i in range(20)
    ]
    jobs[0] = Job("0", "ResNet-50 (batch size 64)", 1, total_steps=1e9, qos="high")
    d, _ = _daemon(tmp_path, table, jobs, weights={"qos": {"high": 4}})
    try:
        d.round()
    finally:
        d.store.release()
    assert _v100(d, "0") > 2 * _v100(d, "1")


def test_account_weights_reach_the_hierarchical_policy(tmp_path, table):
    jobs = [
        Job(str(i), "ResNet-50 (batch size 64)", 1, total_steps=1e9, account="a" if i < 10 else "b")
        for i in range(20)
    ]
    d, _ = _daemon(
        tmp_path, table, jobs, policy="hierarchical_max_min_fairness",
        weights={"accounts": {"a": 3, "b": 1}},
    )  # fmt: skip
    try:
        d.round()
    finally:
        d.store.release()
    assert dict(d.sched_config.accounts) == {"a": 3.0, "b": 1.0}
    assert d.state.allocation is not None
    row = table.row("ResNet-50 (batch size 64)", 1)
    fractions = d.state.allocation.fractions
    share = {  # steps/s each account's jobs get: what max-min fairness equalises
        acct: sum(f * row[t] for j in jobs if j.account == acct for t, f in fractions[j.id].items())
        for acct in ("a", "b")
    }
    assert share["a"] == pytest.approx(3 * share["b"], rel=0.02)  # 1:1 without the weights


def test_apply_weights_leaves_an_unchanged_snapshot_alone(table):
    sim = SimulatedCluster(parse_cluster_spec("v100:1x4"), [Job("1", "A3C", 1)], table)
    snap = sim.observe()
    assert apply_weights(snap, WeightsConfig()) is snap


def test_snapshot_carries_the_qos_and_the_users_weight_uncapped_for_the_daemon():
    # Parsed from squeue JSON captured on a real 22.05; the comment is set here as a job
    # from before the Lua (or with the cap lowered since) would hold it.
    import json
    from dataclasses import replace
    from pathlib import Path

    from slurm_gavel.backends.slurm.from_json import parse_jobs, parse_nodes
    from slurm_gavel.backends.slurm.view import build_view

    data = Path(__file__).parents[1] / "backends" / "data" / "22.05"
    _, nodes = parse_nodes(json.loads((data / "sinfo.json").read_text()))
    _, jobs = parse_jobs(json.loads((data / "squeue.json").read_text()))
    held = next(j for j in jobs if j.comment.startswith("gavel:"))
    # (the capture's cluster has no accounting, so no QOS: set one as slurmdbd would)
    hostile = replace(held, comment="gavel:type=A3C,weight=1000", qos="high")
    view = build_view(nodes, [hostile], None, now=0.0)
    (obs,) = view.snapshot.jobs
    assert obs.job.qos == "high" and obs.job.priority_weight == 1000.0
    capped = apply_weights(view.snapshot, WeightsConfig(qos={"high": 2.0}))
    assert capped.jobs[0].job.priority_weight == 2.0
