"""A job's own request binds where it may run (backends/slurm/fit.py): typed
GPUs, --constraint, --exclude, memory and CPUs per node; hostile constraints refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.act_plan import plan_act
from slurm_gavel.backends.slurm.fit import (
    ConstraintError,
    JobNeeds,
    NodeRoom,
    allowed_nodes,
    matcher,
)
from slurm_gavel.backends.slurm.from_json import job_needs, parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.view import SlurmView
from slurm_gavel.domain.cluster_model import (
    ClusterSnapshot,
    JobPlacement,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job

DATA = Path(__file__).resolve().parents[1] / "data"


def room(name: str, t: str, feats: str = "", mem: int | None = 64000, cpus: int | None = 16):
    return NodeRoom(name, t, 4, frozenset(f for f in feats.split(",") if f), mem, cpus)


NODES = [
    room("v100-1", "v100", "v100,ib"),
    room("v100-2", "v100", "v100"),
    room("p100-1", "p100", "p100,ib"),
    room("k80-1", "k80", "k80"),
]


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ("p100", {"p100-1"}),
        ("p100|k80", {"p100-1", "k80-1"}),
        ("v100&ib", {"v100-1"}),
        ("v100,ib", {"v100-1"}),
        ("[v100|p100]&ib", {"v100-1", "p100-1"}),
        ("(v100|p100)&!ib", {"v100-2"}),
        ("ib*2", {"v100-1", "p100-1"}),  # a count reads as the feature: stricter, never looser
        ("a100", set()),
    ],
)
def test_a_constraint_keeps_a_job_to_the_nodes_it_names(expr, ok):
    nodes, why = allowed_nodes(None, 1, JobNeeds(features=expr), NODES)
    assert nodes == ok
    assert (why != "") == (ok != {n.name for n in NODES})
    if why:
        assert expr in why


@pytest.mark.parametrize(
    "expr", ["p100&", "(p100", "p100)", "&", "p100 $(rm -rf /)", "p100;k80", "[p100|k80", "!"]
)
def test_a_constraint_that_cannot_be_read_places_the_job_nowhere_and_says_so(expr):
    with pytest.raises(ConstraintError):
        matcher(expr)
    nodes, why = allowed_nodes(None, 1, JobNeeds(features=expr), NODES)
    assert nodes == frozenset() and "cannot read --constraint" in why and "a|b" in why


def test_a_typed_request_and_exclude_bind():
    nodes, why = allowed_nodes("v100", 1, JobNeeds(excluded=("v100-1",)), NODES)
    assert nodes == {"v100-2"} and "asks for v100 GPUs" in why and "--exclude" in why


def test_a_node_with_free_gpus_and_no_free_memory_or_cpus_is_not_free():
    nodes = [
        room("v100-1", "v100", mem=500),
        room("v100-2", "v100", cpus=1),
        room("p100-1", "p100"),
    ]
    needs = JobNeeds(memory_per_cpu_mb=1000, cpus_per_node=1)
    assert allowed_nodes(None, 1, needs, nodes)[0] == {"v100-2", "p100-1"}
    needs = JobNeeds(memory_per_gpu_mb=3000, cpus_per_gpu=2)
    got, why = allowed_nodes(None, 2, needs, nodes)
    assert got == {"p100-1"} and "6000 MB" in why
    # memory not counted by Slurm (None): never a reason
    assert allowed_nodes(None, 1, needs, [room("x", "v100", mem=None, cpus=None)])[0] == {"x"}


def test_needs_per_node():
    assert JobNeeds(memory_per_node_mb=5000).on_node(2) == (5000, 1)
    assert JobNeeds(memory_per_cpu_mb=1000, cpus_per_gpu=3).on_node(2) == (6000, 6)
    assert JobNeeds(memory_per_gpu_mb=500, cpus_per_node=4).on_node(2) == (1000, 4)


def test_needs_read_from_each_releases_json():
    """22.05's plain numbers and 24.11+'s number objects; on 24.11+ a --mem-per-gpu job
    also shows that value as memory_per_node (memory_per_tres decides)."""
    raw_22 = {
        "features": "p100|k80",
        "excluded_nodes": "v100-[1-2]",
        "memory_per_node": None,
        "memory_per_cpu": 1000,
        "memory_per_tres": "",
        "minimum_cpus_per_node": 2,
        "cpus_per_tres": "gres:gpu:3",
    }
    n = job_needs(raw_22)
    assert n.features == "p100|k80" and n.excluded == ("v100-1", "v100-2")
    assert (n.memory_per_cpu_mb, n.memory_per_node_mb, n.cpus_per_node, n.cpus_per_gpu) == (
        1000, 0, 2, 3,
    )  # fmt: skip
    raw_26 = {
        "features": "",
        "excluded_nodes": "",
        "memory_per_node": {"set": True, "infinite": False, "number": 500},
        "memory_per_cpu": {"set": False, "infinite": False, "number": 0},
        "memory_per_tres": "gres/gpu:500",
        "minimum_cpus_per_node": {"set": True, "infinite": False, "number": 1},
        "cpus_per_tres": "gres/gpu:2",
        "prefer": "v100|p100",
    }
    n = job_needs(raw_26)
    assert (n.memory_per_gpu_mb, n.memory_per_node_mb, n.cpus_per_gpu) == (500, 0, 2)
    assert n.prefer == "v100|p100" and job_needs(raw_22).prefer == ""  # 22.05: no --prefer


def test_node_features_memory_and_cpus_from_a_capture():
    doc = json.loads((DATA / "22.05" / "sinfo.json").read_text())
    _, nodes = parse_nodes(doc)
    v = next(n for n in nodes if n.name == "v100-1")
    assert v.memory_mb > 0 and v.cpus == 16
    _, jobs = parse_jobs(json.loads((DATA / "22.05" / "squeue.json").read_text()))
    assert all(j.needs.cpus_per_node >= 1 for j in jobs)


def _job(job_id: str, needs: JobNeeds) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state="PENDING", reason="JobHeldUser", comment="gavel:type=A3C",
        partitions=("gpu",), nodes=(), gpu_request=None, gpu_slices=(), node_count=1,
        priority=0, restarts=0, submit_time=1, start_time=0, end_time=0, exit_code=None,
        account="", user="u", needs=needs,
    )  # fmt: skip


def test_starts_that_fit_a_node_one_at_a_time_but_not_together_wait():
    """Two jobs of 40 GB each on a 64 GB node: each fits alone (allowed), not both: the
    second is not released (Slurm would leave it pending while the round credits it)."""
    node = SlurmNode(
        "v100-1", "idle", frozenset(), "v100", 4, 0, ("gpu",),
        memory_mb=64000, memory_used_mb=0, cpus=16, cpus_used=0,
    )  # fmt: skip
    needs = JobNeeds(memory_per_node_mb=40000)
    jobs = {j: _job(j, needs) for j in ("1", "2")}
    observed = tuple(ObservedJob(Job(j, "A3C", 1), JobState.PENDING) for j in jobs)
    snap = ClusterSnapshot(0.0, (Node("v100-1", "v100", 4, "gpu"),), observed)
    view = SlurmView(snap, jobs, {"v100-1": node})
    placement = RoundPlacement(
        0, 0.0, {j: JobPlacement(j, "v100", (NodeSlice("v100-1", 1),)) for j in jobs}
    )
    plan = plan_act(placement, view, {"gpu"})
    assert [o.job_id for o in plan.starts] == ["1"]
    ((job, why),) = plan.failed
    assert job == "2" and "40000 MB" in why
    # with room for both, both start
    roomy = SlurmView(snap, jobs, {"v100-1": replace(node, memory_mb=128000)})
    assert len(plan_act(placement, roomy, {"gpu"}).starts) == 2
