"""A job's node layout as its request fixes it (slurm/layout.py), read from JSON the
real daemons printed (tests/backends/data/<release>/listing-jobs/round2.json, captured by
tests/backends/slurm/cli/test_jobs_from_text_on_slurm.py: `rank_per_node` is
`-N 2 --ntasks-per-node=1 --gres=gpu:1`, `tasks_per_node` `-n 4 --ntasks-per-node=2`,
`two_nodes` `-N 2 -c 2 --gres=gpu:1`), and kept by the snapshot whatever the daemon's
own placements later make of the record."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.from_json import parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.layout import asked_nodes, layout_why
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.backends.slurm.view import build_view

DATA = Path(__file__).parents[1] / "data"
RELEASES = ["22.05", "24.11", "26.05"]


def captured(release: str) -> list[SlurmJob]:
    doc = json.loads((DATA / release / "listing-jobs" / "round2.json").read_text())
    return parse_jobs(doc)[1]


def managed_new(release: str) -> list[SlurmJob]:
    return [j for j in captured(release) if j.comment.startswith("gavel:") and j.state == "PENDING"]


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_says_the_node_count_a_request_fixes(release):
    jobs = managed_new(release)
    rank_per_node = [j for j in jobs if j.tasks_per_node == 1]
    assert len(rank_per_node) == 1
    (ddp,) = rank_per_node
    assert (ddp.node_count, ddp.tasks) == (2, 2) and asked_nodes(ddp) == 2
    (per_node,) = [j for j in jobs if j.tasks_per_node == 2]
    assert per_node.tasks == 4 and asked_nodes(per_node) == 2  # no -N: 4 tasks, 2 a node
    two = [j for j in jobs if j.node_count == 2 and j.tasks_per_node == 0]
    assert two and all(asked_nodes(j) == 2 for j in two)  # -N 2 alone
    free = [j for j in jobs if j.node_count == 1 and j.tasks_per_node == 0]
    assert len(free) >= 8 and all(asked_nodes(j) is None for j in free)


def test_tasks_per_node_alone_fixes_one_node_and_tasks_round_up():
    base = managed_new("22.05")[0]
    assert asked_nodes(replace(base, node_count=1, tasks=1, tasks_per_node=1)) == 1
    assert asked_nodes(replace(base, node_count=1, tasks=5, tasks_per_node=2)) == 3
    assert asked_nodes(replace(base, node_count=3, tasks=2, tasks_per_node=1)) == 3


@pytest.mark.hostile(guards="crash")
@pytest.mark.parametrize("tasks,per_node", [(0, 1), (-1, 1), (2**31, 1), (2, -5), (-7, -7)])
def test_odd_task_counts_never_crash_and_never_fix_fewer_than_one_node(tasks, per_node):
    base = managed_new("22.05")[0]
    got = asked_nodes(replace(base, node_count=1, tasks=tasks, tasks_per_node=per_node))
    assert got is None or got >= 1


def test_a_scale_the_node_count_does_not_divide_is_explained():
    assert layout_why(4, 2) == ""
    assert "3 GPUs cannot be spread evenly over the 2 nodes" in layout_why(3, 2)


@pytest.mark.parametrize("release", RELEASES)
def test_the_snapshot_keeps_the_first_seen_layout_after_the_daemons_placement(release):
    """The daemon's own update (NumNodes=1-1) would make a free job's record look fixed,
    and an earlier packing of a -N 2 job look like one node: the first look decides."""
    _, nodes = parse_nodes(json.loads((DATA / "22.05" / "sinfo.json").read_text()))
    jobs = managed_new(release)
    (ddp,) = [j for j in jobs if j.tasks_per_node == 1]
    free = next(j for j in jobs if j.node_count == 1 and j.tasks_per_node == 0)
    layouts: dict[str, int | None] = {}
    snap = build_view(nodes, [ddp, free], None, 1000.0, layouts=layouts).snapshot
    counts = {o.job.id: o.job.node_count for o in snap.jobs}
    assert counts == {ddp.job_id: 2, free.job_id: None}
    assert {o.job.id: o.job.scale_factor for o in snap.jobs}[ddp.job_id] == 2
    # placed since: the free one spread over two nodes, the DDP one (wrongly) on one
    moved = [replace(ddp, node_count=1), replace(free, node_count=2)]
    snap = build_view(nodes, moved, None, 1000.0, layouts=layouts).snapshot
    assert {o.job.id: o.job.node_count for o in snap.jobs} == counts
    # a job that left is forgotten
    build_view(nodes, [ddp], None, 1000.0, layouts=layouts)
    assert set(layouts) == {ddp.job_id}


def test_a_job_whose_gpus_its_nodes_cannot_share_evenly_is_allowed_no_node():
    _, nodes = parse_nodes(json.loads((DATA / "22.05" / "sinfo.json").read_text()))
    (ddp,) = [j for j in managed_new("26.05") if j.tasks_per_node == 1]
    odd = replace(ddp, comment="gavel:type=A3C,scale=3")
    (o,) = build_view(nodes, [odd], None, 1000.0).snapshot.jobs
    assert o.job.node_count == 2 and o.allowed is not None and not o.allowed.nodes
    assert "cannot be spread evenly over the 2 nodes" in o.allowed.why
