"""A checkpoint signal sent just after a node's slurmd died is lost; the job is not
requeue-held at its grace end while slurmctld has not flagged the node yet (
it was, and its work since its start was lost). The batch host's slurmd is asked
directly (sstat) before the requeue-hold, on the real cluster of each release."""

from __future__ import annotations

import time

import pytest
from slurmd_control import start_slurmd, stop_slurmd

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, NodeState, RoundPlacement

pytestmark = pytest.mark.slurm

NODE = "v100-2"


def node_state(slurm, node: str) -> NodeState:
    return {n.name: n.state for n in cli_backend(env=slurm.env).observe().nodes}[node]


def test_a_signal_lost_before_the_node_is_flagged_requeues_nothing(slurm):
    slurm.cancel_all()
    job = slurm.sbatch_ignoring_the_signal()  # runs past any grace, signal or not
    b = cli_backend(env=slurm.env, grace_s=2.0)
    b.observe()
    place = JobPlacement(job, "v100", (NodeSlice(NODE, 1),))
    assert b.act(RoundPlacement(0, 0.0, {job: place})).started == (job,)
    slurm.wait_state(job, "RUNNING")
    time.sleep(2)
    argv = stop_slurmd(slurm, NODE)
    try:
        b.observe()
        res = b.act(RoundPlacement(1, 0.0, {}))  # preempt: the signal is lost
        assert res.preempted == (job,), res
        time.sleep(3)  # its 2-s grace is over; slurmctld flags the node ~10 s on
        b.observe()
        assert b.view is not None and b.view.nodes[NODE].condition is NodeState.UP
        res = b.act(RoundPlacement(2, 0.0, {}))  # the first act after its grace
        assert "may not have reached it" in dict(res.failed).get(job, ""), res
        assert b.transport.commands.counts["requeuehold"] == 0
        assert slurm.state(job) == "RUNNING"
    finally:
        start_slurmd(slurm, NODE, argv)
    deadline = time.monotonic() + 60
    while node_state(slurm, NODE) is not NodeState.UP and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.state(job) == "RUNNING" and slurm.show(job)["Restarts"] == "0"
    slurm.cancel_all()
