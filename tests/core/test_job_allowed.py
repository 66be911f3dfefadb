"""A job's own request (ObservedJob.allowed) binds the round: zero cells on the GPU
types it rules out (the policy gives it nothing there) and the mechanism never places
it on a node outside it ("constraints and types bind")."""

from __future__ import annotations

from slurm_gavel.core.mechanism import MechanismJob, assign
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import considered_jobs
from slurm_gavel.core.skips import SkipCode
from slurm_gavel.domain.cluster_model import (
    Allowed,
    JobPlacement,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
)
from slurm_gavel.domain.model import Allocation, Job
from slurm_gavel.domain.throughputs import load_table

NODES = [Node("v100-1", "v100", 4), Node("v100-2", "v100", 4), Node("p100-1", "p100", 4)]
ROW = {"v100": 2.0, "p100": 1.0}


def test_a_type_the_job_may_not_use_is_a_zero_cell_and_its_reason_is_kept():
    job = Job("1", "ResNet-18 (batch size 16)", 1)
    only_p100 = Allowed(frozenset({"p100-1"}), frozenset({"p100"}), "it asks for p100 GPUs")
    nowhere = Allowed(frozenset(), frozenset(), "--constraint=a100")
    jobs = [
        ObservedJob(job, JobState.PENDING, allowed=only_p100),
        ObservedJob(Job("2", job.job_type, 1), JobState.PENDING, allowed=nowhere),
        ObservedJob(Job("3", job.job_type, 1), JobState.PENDING),
    ]
    cap = {"v100": 8, "p100": 4}
    out, skipped = considered_jobs(
        jobs, SchedulerConfig(table=load_table()), cap, row_of=lambda o: ROW
    )
    rows = {o.job.id: row for o, row in out}
    assert rows["1"] == {"v100": 0.0, "p100": 1.0}
    assert rows["3"] == ROW
    assert [(j, s.code, s.detail) for j, s in skipped] == [
        ("2", SkipCode.NO_NODE_FITS, "no usable node fits it: --constraint=a100")
    ]


def test_the_mechanism_places_a_job_only_on_its_allowed_nodes():
    alloc = Allocation("test", {"a": {"v100": 1.0}, "b": {"v100": 1.0}})
    jobs = {
        "a": MechanismJob("a", 2, ROW, nodes=frozenset({"v100-2"})),
        "b": MechanismJob("b", 2, ROW),
    }
    placed = assign(alloc, jobs, NODES, {}, 0.0)
    assert placed["a"].nodes == (NodeSlice("v100-2", 2),)
    assert placed["b"].gpu_type == "v100"


def test_a_job_whose_allowed_nodes_are_full_waits_instead_of_landing_elsewhere():
    alloc = Allocation("test", {"a": {"v100": 1.0}, "b": {"v100": 1.0}})
    jobs = {
        "b": MechanismJob("b", 4, ROW, nodes=frozenset({"v100-1"})),
        "a": MechanismJob("a", 2, ROW, nodes=frozenset({"v100-1"})),
    }
    placed = assign(alloc, jobs, NODES, {}, 0.0)
    assert len(placed) == 1
    (p,) = placed.values()
    assert all(s.node == "v100-1" for s in p.nodes)


def test_a_running_job_is_not_kept_on_a_node_it_may_no_longer_use():
    cur = JobPlacement("a", "v100", (NodeSlice("v100-1", 1),))
    alloc = Allocation("test", {"a": {"v100": 1.0}})
    jobs = {"a": MechanismJob("a", 1, ROW, cur, nodes=frozenset({"v100-2"}))}
    placed = assign(alloc, jobs, NODES, {}, 0.0)
    assert placed["a"].nodes == (NodeSlice("v100-2", 1),)
    # and with no restriction, the lease is extended in place
    jobs = {"a": MechanismJob("a", 1, ROW, cur)}
    assert assign(alloc, jobs, NODES, {}, 0.0)["a"] is cur


def test_a_preference_is_tried_first_and_never_required():
    alloc = Allocation("test", {"a": {"v100": 1.0}, "b": {"v100": 1.0}})
    jobs = {"a": MechanismJob("a", 2, ROW, prefer=frozenset({"v100-2"}))}
    assert assign(alloc, jobs, NODES, {}, 0.0)["a"].nodes == (NodeSlice("v100-2", 2),)
    # its preferred node full: placed elsewhere all the same (soft)
    jobs = {
        "b": MechanismJob("b", 4, ROW, nodes=frozenset({"v100-2"})),
        "a": MechanismJob("a", 2, ROW, prefer=frozenset({"v100-2"})),
    }
    placed = assign(alloc, jobs, NODES, {}, 0.0)
    assert placed["b"].nodes == (NodeSlice("v100-2", 4),)
    assert placed["a"].nodes == (NodeSlice("v100-1", 2),)
