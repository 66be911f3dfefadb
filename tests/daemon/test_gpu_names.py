"""The config's GPU type names both ways (daemon/gpu_names.py): Slurm's -> the table's
on what the daemon observes, the table's -> Slurm's on what it asks the backend to do."""

from __future__ import annotations

from slurm_gavel.daemon.gpu_names import to_slurm_names, to_table_names
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

NAMES = {"tesla_v100": "v100"}  # config gpu_types: Slurm's GRES type -> the table's


def test_an_observed_snapshot_gets_the_tables_names():
    snap = ClusterSnapshot(
        0.0,
        (Node("a", "tesla_v100", 4, "gpu"), Node("b", "k80", 4, "gpu")),
        (
            ObservedJob(Job("1", "A3C", 1), JobState.RUNNING, "tesla_v100", (NodeSlice("a", 1),)),
            ObservedJob(Job("2", "A3C", 1), JobState.PENDING),
        ),
    )
    named = to_table_names(snap, NAMES)
    assert [n.gpu_type for n in named.nodes] == ["v100", "k80"]  # k80: not in the map
    assert [o.gpu_type for o in named.jobs] == ["v100", None]
    assert named.capacity() == {"v100": 4, "k80": 4}


def test_a_placement_goes_back_to_slurms_names():
    placement = RoundPlacement(
        3,
        0.0,
        {
            "1": JobPlacement("1", "v100", (NodeSlice("a", 1),)),
            "2": JobPlacement("2", "k80", (NodeSlice("b", 1),)),
        },
    )
    back = to_slurm_names(placement, NAMES)
    assert {j: p.gpu_type for j, p in back.jobs.items()} == {"1": "tesla_v100", "2": "k80"}
    assert back.round_index == 3 and back.jobs["1"].nodes == (NodeSlice("a", 1),)
