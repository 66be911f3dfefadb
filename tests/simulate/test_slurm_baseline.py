"""The Slurm FIFO baseline's backfill reservation on a node that shrank under its jobs."""

from __future__ import annotations

from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, Node, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.slurm_baseline import _placement

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"


def test_a_shrunk_node_offers_no_gpus_to_the_reservation_rather_than_a_negative_count():
    r1 = TABLE.throughput(RESNET, 1, "v100")
    r2 = TABLE.throughput(RESNET, 2, "v100")
    r4 = TABLE.throughput(RESNET, 4, "v100")
    # v100-0 has 4 GPUs, 2 of them now held by jobs the scheduler does not manage,
    # yet our job still runs on all 4 (it started before): free there is 2 - 4 = -2.
    nodes = (
        Node("v100-0", "v100", 4, gpus_held_unmanaged=2),
        Node("v100-1", "v100", 4),
    )
    running = [
        ObservedJob(Job("big", RESNET, 4, total_steps=r4 * 1000.0), JobState.RUNNING,
                    gpu_type="v100", nodes=(NodeSlice("v100-0", 4),), steps_done=0.0),
        ObservedJob(Job("small", RESNET, 2, total_steps=r2 * 99.0), JobState.RUNNING,
                    gpu_type="v100", nodes=(NodeSlice("v100-1", 2),), steps_done=0.0),
    ]  # fmt: skip
    queued = [
        # needs 4 of one type: blocked now (2 free), reserved for when "small" ends
        ObservedJob(Job("wide", RESNET, 4, total_steps=r4 * 10.0, arrival_time=1.0),
                    JobState.PENDING),
        # a 1-GPU job ending after that reservation: it may only start if it leaves
        # the reserved job its 4 GPUs
        ObservedJob(Job("late", RESNET, 1, total_steps=r1 * 10_000.0, arrival_time=2.0),
                    JobState.PENDING),
    ]  # fmt: skip
    placed = _placement(ClusterSnapshot(0.0, nodes, tuple(running + queued)), TABLE, False)
    # At "small"'s end v100-1 has 4 free and the shrunk node none: exactly the 4 the
    # wide job needs, so "late" must wait. Counting -2 for the shrunk node would push
    # the reservation to "big"'s end and let "late" take a GPU the wide job needs.
    assert set(placed) == {"big", "small"}
