"""Snapshot building and act planning on the captured 22.05 JSON (no cluster needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_captures import scenario

from slurm_gavel.backends.slurm.act_plan import plan_act
from slurm_gavel.backends.slurm.cli.argv import render_update
from slurm_gavel.backends.slurm.from_json import parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.view import build_view
from slurm_gavel.domain.cluster_model import (
    JobPlacement,
    JobState,
    NodeSlice,
    NodeState,
    RoundPlacement,
)

DATA = Path(__file__).parents[1] / "data"
S = scenario(DATA / "22.05")


def view(managed_partitions=None, first_submit=None):
    _, nodes = parse_nodes(json.loads((DATA / "22.05" / "sinfo.json").read_text()))
    _, jobs = parse_jobs(json.loads((DATA / "22.05" / "squeue.json").read_text()))
    return build_view(nodes, jobs, managed_partitions, 1000.0, first_submit=first_submit)


def jp(job_id, gpu_type, *slices, partner=None):
    return JobPlacement(job_id, gpu_type, tuple(NodeSlice(n, g) for n, g in slices), partner)


def test_snapshot_nodes_exclude_unmanaged_gpus_and_map_states():
    snap = view().snapshot
    nodes = {n.name: n for n in snap.nodes}
    assert nodes["k80-1"].gpus_held_unmanaged == 3  # the unmanaged job's GPUs
    assert nodes["v100-1"].gpus_held_unmanaged == 0  # held by a managed job
    assert nodes["p100-2"].state is NodeState.DRAINED
    assert nodes["k80-2"].state is NodeState.DOWN
    assert snap.capacity() == {"k80": 1, "p100": 4, "v100": 8}


def test_snapshot_jobs_are_the_managed_ones_with_their_states():
    snap = view().snapshot
    jobs = {j.job.id: j for j in snap.jobs}
    assert set(jobs) == {S["held"], S["run1"], S["multi"], S["ckpt"], S["cancelled"]}
    assert jobs[S["held"]].state is JobState.PENDING
    assert jobs[S["held"]].job.job_type == "ResNet-50 (batch size 64)"
    assert jobs[S["held"]].job.scale_factor == 1
    run1 = jobs[S["run1"]]
    assert run1.state is JobState.RUNNING and run1.gpu_type == "v100"
    assert run1.nodes == (NodeSlice("v100-1", 2),) and run1.job.scale_factor == 2
    multi = jobs[S["multi"]]
    assert multi.nodes == (NodeSlice("p100-1", 4), NodeSlice("p100-2", 4))
    assert multi.job.scale_factor == 8
    assert jobs[S["ckpt"]].state is JobState.HELD and jobs[S["ckpt"]].restarts == 1
    done = jobs[S["cancelled"]]
    assert done.state is JobState.DONE and not done.succeeded and done.finish_time


def test_managed_partitions_filter_jobs_and_nodes():
    v = view(managed_partitions={"v100"})
    assert {n.name for n in v.snapshot.nodes} == {"v100-1", "v100-2"}
    # Jobs sit in partition gpu (held, cancelled) or were moved to v100/p100 when started.
    assert {j.job.id for j in v.snapshot.jobs} == {S["run1"], S["ckpt"]}


def test_first_submit_time_survives_requeue():
    seen = {S["ckpt"]: 5.0}
    v = view(first_submit=seen)
    jobs = {j.job.id: j for j in v.snapshot.jobs}
    assert jobs[S["ckpt"]].job.arrival_time == 5.0
    assert jobs[S["held"]].job.arrival_time > 5.0


def test_plan_keep_start_preempt():
    v = view()
    placement = RoundPlacement(
        0,
        0,
        {
            S["run1"]: jp(S["run1"], "v100", ("v100-1", 2)),  # unchanged: keep
            S["held"]: jp(S["held"], "v100", ("v100-2", 1)),  # held: start
            # checkpointed: restart (on its type: the capture placed it with the
            # typed gpu:v100:1, which now reads as its own request)
            S["ckpt"]: jp(S["ckpt"], "v100", ("v100-2", 1)),
        },
    )
    plan = plan_act(placement, v, None)
    assert plan.keep == [S["run1"]]
    assert [o.job_id for o in plan.starts] == [S["held"], S["ckpt"]]
    assert plan.preempt == [S["multi"]]  # running, not placed
    assert plan.moves == [] and plan.failed == []
    start = plan.starts[0]
    assert start.partition == "gpu"  # its own partition holds the node: kept
    assert render_update(start) == (
        f"update JobId={S['held']} Partition=gpu NumNodes=1-1 NodeList=v100-2 "
        "Gres=gpu:1 StartTime=now"
    )


def test_plan_move_and_partition_choice():
    v = view(managed_partitions={"v100", "p100", "k80"})
    placement = RoundPlacement(
        0,
        0,
        {
            S["run1"]: jp(S["run1"], "v100", ("v100-2", 2)),
            S["multi"]: jp(S["multi"], "p100", ("p100-1", 4), ("p100-2", 4)),
        },
    )
    plan = plan_act(placement, v, {"v100", "p100", "k80"})
    assert plan.keep == [S["multi"]]
    (move,) = plan.moves
    assert (move.job_id, move.partition, move.nodes) == (S["run1"], "v100", ("v100-2",))
    assert move.typed and move.gres() == "gpu:v100:2"  # its own type, kept
    assert plan.to_signal == [S["run1"]]


def test_plan_never_places_a_typed_job_on_another_type():
    """run1 asks for v100 (gres:gpu:v100:2): a placement on p100 is refused with the
    reason, never carried out (--gres=gpu:p100:1 ran on a v100)."""
    v = view(managed_partitions={"v100", "p100", "k80"})
    placement = RoundPlacement(
        0, 0, {S["run1"]: jp(S["run1"], "p100", ("p100-1", 1), ("p100-2", 1))}
    )
    plan = plan_act(placement, v, {"v100", "p100", "k80"})
    assert plan.moves == [] and plan.starts == []
    ((job, why),) = plan.failed
    assert job == S["run1"] and "p100-1,p100-2" in why and "asks for v100 GPUs" in why


@pytest.mark.parametrize(
    ("placement", "reason"),
    [
        (lambda: jp(S["unmanaged"], "k80", ("k80-1", 1)), "not a managed job"),
        (lambda: jp(S["cancelled"], "k80", ("k80-1", 1)), "finished"),
        (lambda: jp(S["held"], "v100", ("v100-1", 2), ("v100-2", 1)), "uneven GPUs"),
        (lambda: jp(S["held"], "v100", ("k80-1", 1)), "has k80 GPUs, not v100"),
        (lambda: jp(S["held"], "v100", ("nowhere", 1)), "unknown node nowhere"),
        (lambda: jp(S["held"], "v100"), "names no nodes"),
    ],
)
def test_plan_failures_are_reported_per_job(placement, reason):
    p = placement()
    plan = plan_act(RoundPlacement(0, 0, {p.job_id: p}), view(), None)
    ((job_id, why),) = plan.failed
    assert job_id == p.job_id and reason in why
    assert not plan.starts and not plan.moves


def test_space_sharing_pair_starts_one_and_reports_the_other():
    v = view()
    a, b = S["held"], S["ckpt"]
    placement = RoundPlacement(
        0,
        0,
        {
            a: jp(a, "v100", ("v100-2", 1), partner=b),
            b: jp(b, "v100", ("v100-2", 1), partner=a),
        },
    )
    plan = plan_act(placement, v, None)
    assert [o.job_id for o in plan.starts] == [a]
    assert plan.failed[0][0] == b and "sharing" in plan.failed[0][1]


def test_job_that_left_squeue_unseen_is_reported_done_once():
    from slurm_gavel.backends.slurm.view import add_vanished
    from slurm_gavel.domain.model import Job

    v = view()
    gone = Job(id="777", job_type="A3C")
    add_vanished(v, {"777": gone, S["run1"]: Job(S["run1"], "x")}, now=1234.0)
    extra = [j for j in v.snapshot.jobs if j.job.id == "777"]
    assert len(extra) == 1 and extra[0].state is JobState.DONE
    assert extra[0].finish_time == 1234.0 and not extra[0].succeeded
    assert any("MinJobAge" in w for w in v.warnings)
    assert sum(j.job.id == S["run1"] for j in v.snapshot.jobs) == 1  # present: not added


def test_jobs_asking_alike_are_fitted_to_the_nodes_once_per_request(monkeypatch):
    """The nodes are walked once per distinct request (type, size, needs, places), not
    once per job, and each job gets what fitting it alone gives."""
    from dataclasses import replace

    from slurm_gavel.backends.slurm import view as view_module
    from slurm_gavel.backends.slurm.fit import JobNeeds
    from slurm_gavel.backends.slurm.view import job_allowed, node_rooms

    _, nodes = parse_nodes(json.loads((DATA / "22.05" / "sinfo.json").read_text()))
    _, jobs = parse_jobs(json.loads((DATA / "22.05" / "squeue.json").read_text()))
    held = next(j for j in jobs if j.job_id == S["held"])
    needs = [
        JobNeeds(),
        JobNeeds(excluded=("v100-1",)),
        JobNeeds(memory_per_node_mb=10**9),  # fits no node
        JobNeeds(features="nosuch|(("),  # a constraint that cannot be read
    ]
    many = [replace(held, job_id=str(900000 + i), needs=needs[i % len(needs)]) for i in range(400)]
    calls = []
    real = view_module.allowed_nodes

    def counted(*args, **kw):
        calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(view_module, "allowed_nodes", counted)
    snap = build_view(nodes, [*jobs, *many], None, 1000.0).snapshot
    assert 0 < len(calls) <= len(needs) + len(jobs)
    got = {o.job.id: o.allowed for o in snap.jobs}
    rooms = node_rooms(nodes, [], None)
    monkeypatch.setattr(view_module, "allowed_nodes", real)
    for sj in many:
        alone = job_allowed(sj, 1, rooms)
        assert got[sj.job_id] == alone
    assert len({got[sj.job_id] for sj in many}) == len(needs)
