"""The round through a node whose slurmd stops answering, on a small
in-memory cluster that carries out placements exactly: its jobs keep their place
and their time, nothing new goes there, the allocation is not recomputed for it,
and once Slurm declares the node DOWN its jobs are placed again elsewhere."""

from __future__ import annotations

import logging
from dataclasses import replace

from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.events import RoundEvents
from slurm_gavel.daemon.status_records import jobs_view
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    Node,
    NodeSlice,
    NodeState,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
A3C = "A3C"
ROUND = 60.0


class TinyCluster:
    """Nodes whose state a test sets; act() makes the placement true at once."""

    def __init__(self, nodes: list[Node], jobs: list[Job]) -> None:
        self.time = 0.0
        self.nodes = {n.name: n for n in nodes}
        self.jobs = {j.id: j for j in jobs}
        self.where: dict[str, JobPlacement] = {}
        self.preempted: list[str] = []
        self.started: list[str] = []

    def set_state(self, node: str, state: NodeState) -> None:
        self.nodes[node] = replace(self.nodes[node], state=state)

    def observe(self) -> ClusterSnapshot:
        jobs = []
        for j in self.jobs.values():
            p = self.where.get(j.id)
            if p is None:
                jobs.append(ObservedJob(j, JobState.PENDING))
            else:
                jobs.append(ObservedJob(j, JobState.RUNNING, p.gpu_type, p.nodes))
        return ClusterSnapshot(self.time, tuple(self.nodes.values()), tuple(jobs))

    def act(self, placement: RoundPlacement) -> ActResult:
        kept, started, preempted = [], [], []
        for j in list(self.where):
            if j not in placement.jobs:
                preempted.append(j)
                del self.where[j]
        for j, p in placement.jobs.items():
            if self.where.get(j) is not None and self.where[j].same_place(p):
                kept.append(j)
            else:
                started.append(j)
                self.where[j] = p
        self.preempted += preempted
        self.started += started
        return ActResult(started=tuple(started), kept=tuple(kept), preempted=tuple(preempted))

    def lose_node(self, node: str) -> None:
        """Slurm declared the node DOWN: its jobs are requeued (pending again)."""
        self.set_state(node, NodeState.DOWN)
        for j, p in list(self.where.items()):
            if any(s.node == node for s in p.nodes):
                del self.where[j]


def rounds(state, cluster, config, n):
    reports = []
    for _ in range(n):
        state, r = run_round(state, cluster, config)
        reports.append(r)
        cluster.time += ROUND
    return state, reports


def setup(n_jobs=6):
    nodes = [Node("v100-1", "v100", 2), Node("v100-2", "v100", 2), Node("k80-1", "k80", 2)]
    jobs = [Job(str(i), A3C, 1, total_steps=1e9) for i in range(n_jobs)]
    config = SchedulerConfig(table=TABLE, settings=replace(DAEMON_DEFAULTS, round_seconds=ROUND))
    return TinyCluster(nodes, jobs), config


def on(cluster, node):
    return {j for j, p in cluster.where.items() if any(s.node == node for s in p.nodes)}


def test_jobs_on_a_node_not_responding_keep_their_place_and_their_time():
    cluster, config = setup(n_jobs=6)  # 6 jobs, 6 GPUs: everyone runs, no rotation
    state, _ = rounds(SchedulerState(), cluster, config, 2)
    stuck = on(cluster, "v100-1")
    assert len(stuck) == 2
    got = {j: sum(state.jobs[j].received_s.values()) for j in stuck}
    allocation = state.allocation
    cluster.set_state("v100-1", NodeState.NOT_RESPONDING)
    cluster.preempted.clear()
    state, reports = rounds(state, cluster, config, 3)
    # Before: the node's GPUs left the capacity, its jobs were preempted (their
    # checkpoint signal lost on the unreachable node) and the allocation recomputed.
    assert not cluster.preempted
    assert on(cluster, "v100-1") == stuck
    for r in reports:
        assert set(r.result.kept) >= stuck and not r.reallocated
    assert state.allocation is allocation
    for j in stuck:  # credited as running all along
        assert sum(state.jobs[j].received_s.values()) == got[j] + 3 * ROUND


def test_nothing_new_goes_to_a_node_not_responding():
    cluster, config = setup(n_jobs=3)  # 3 jobs on 6 GPUs: free GPUs everywhere
    state, _ = rounds(SchedulerState(), cluster, config, 1)
    busy = {s.node for p in cluster.where.values() for s in p.nodes}
    idle_node = next(n for n in ("v100-1", "v100-2", "k80-1") if n not in busy)
    cluster.set_state(idle_node, NodeState.NOT_RESPONDING)
    cluster.jobs.update({str(i): Job(str(i), A3C, 1, total_steps=1e9) for i in range(3, 6)})
    state, _ = rounds(state, cluster, config, 2)
    assert not on(cluster, idle_node)


def test_once_slurm_declares_the_node_down_its_jobs_are_placed_again():
    cluster, config = setup(n_jobs=4)
    state, _ = rounds(SchedulerState(), cluster, config, 1)
    stuck = on(cluster, "v100-1")
    cluster.set_state("v100-1", NodeState.NOT_RESPONDING)
    state, _ = rounds(state, cluster, config, 1)
    assert on(cluster, "v100-1") == stuck
    cluster.lose_node("v100-1")
    state, _ = rounds(state, cluster, config, 1)
    assert stuck <= set(cluster.where) and not on(cluster, "v100-1")


def test_status_and_log_say_what_happens_to_the_jobs_of_such_a_node(caplog):
    cluster, config = setup(n_jobs=6)
    events = RoundEvents()
    state, (r,) = rounds(SchedulerState(), cluster, config, 1)
    events.record(r, cluster.observe(), (), duration=0.1, commands=None, dry_run=False)
    stuck = on(cluster, "v100-1")
    cluster.set_state("v100-1", NodeState.NOT_RESPONDING)
    with caplog.at_level(logging.INFO, logger="slurm_gavel.daemon"):
        snap = cluster.observe()
        state, (r,) = rounds(state, cluster, config, 1)
        events.record(r, snap, (), duration=0.1, commands=None, dry_run=False)
        cluster.set_state("v100-1", NodeState.UP)
        snap = cluster.observe()
        state, (r,) = rounds(state, cluster, config, 1)
        events.record(r, snap, (), duration=0.1, commands=None, dry_run=False)
    news = [rec for rec in caplog.records if getattr(rec, "event", None) == "node_state"]
    assert [(rec.fields["state"], rec.fields["was"]) for rec in news] == [
        ("not_responding", "up"),
        ("up", "not_responding"),
    ]
    assert news[0].levelno == logging.WARNING and "keep running" in news[0].fields["what"]
    assert set(news[0].fields["jobs"].split(",")) == stuck
    cluster.set_state("v100-1", NodeState.NOT_RESPONDING)
    view = jobs_view(cluster.observe(), r)
    assert on(cluster, "v100-1")
    for j in on(cluster, "v100-1"):
        assert view[j]["state"] == "kept" and "not responding" in view[j]["reason"]
        assert view[j]["nodes"] == [["v100-1", 1]]


def test_a_job_spread_over_an_unresponsive_and_a_responding_node_keeps_both_halves():
    cluster, config = setup(n_jobs=0)
    big = Job("big", A3C, 2, total_steps=1e9)
    cluster.jobs["big"] = big
    cluster.where["big"] = JobPlacement(
        "big", "v100", (NodeSlice("v100-1", 1), NodeSlice("v100-2", 1)), consolidated=False
    )
    cluster.nodes["v100-1"] = replace(cluster.nodes["v100-1"], gpus_held_unmanaged=1)
    cluster.set_state("v100-1", NodeState.NOT_RESPONDING)
    cluster.jobs.update({str(i): Job(str(i), A3C, 1, total_steps=1e9) for i in range(4)})
    rounds(SchedulerState(), cluster, config, 2)
    assert cluster.where["big"].nodes == (NodeSlice("v100-1", 1), NodeSlice("v100-2", 1))
    used_v100_2 = sum(s.gpus for p in cluster.where.values() for s in p.nodes if s.node == "v100-2")
    assert used_v100_2 <= 2  # the kept half is not given to anyone else
