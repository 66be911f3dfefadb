"""The requeue-hold's race with a job's own end on the real cluster of each release,
through slurmrestd (the REST backend): its requeue-hold carries Slurm's Incomplete flag,
so a job that ended just before it is not run again.

The grace's logic (each job requeue-held after its own grace, capped by the admin's
maximum; between rounds by enforce_grace; a run too young for the signal preempted a
round later; this race through the CLI transport's command) runs on the fake Slurm in
test_grace_on_fake.py, and what Slurm does there is pinned on each release by the
contract scenarios requeue_hold_and_checkpoint, signal_without_a_handler and runs_end
(the CLI transport's `requeuehold Incomplete` of an ended job)."""

from __future__ import annotations

import time

import pytest

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm


def build(slurm, **options: float) -> SlurmBackend:  # type: ignore[no-untyped-def]
    """The REST backend on the cluster's slurmrestd socket."""
    return rest_backend(rest_up(slurm.run_dir), env=slurm.env, poll_s=0.2, **options)


def placement(round_index: int, jobs: list[str]) -> RoundPlacement:
    return RoundPlacement(
        round_index,
        0.0,
        {j: JobPlacement(j, "v100", (NodeSlice("v100-1", 1),)) for j in jobs},
    )


def test_a_job_that_ends_just_before_its_requeue_hold_is_not_run_again(slurm):
    """The race CI hit (24.11): a job ignores the signal, is seen RUNNING when its grace
    ends, and finishes before the requeue-hold reaches slurmctld (here: while the
    backend reads the nodes, the step between the two). Slurm requeues even a batch
    job that has ended; the daemon's requeue-hold must not, or the finished job runs
    again from its last checkpoint. Before: PENDING, requeued in held state, Restarts=1."""
    cluster = build(slurm, grace_s=1.0, fresh_run_s=0.0)
    job = slurm.sbatch("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null",
                       "--wrap", "trap '' USR1; sleep 4")  # fmt: skip
    cluster.observe()
    cluster.act(placement(0, [job]))
    slurm.wait_state(job, "RUNNING")
    time.sleep(1)  # its trap is set
    cluster.observe()
    assert cluster.act(placement(1, [])).preempted == (job,)
    read_nodes = cluster.transport.read_nodes

    def after_the_job_ended():  # type: ignore[no-untyped-def]
        slurm.wait_state(job, "COMPLETED", "COMPLETING")
        return read_nodes()

    cluster.transport.read_nodes = after_the_job_ended  # type: ignore[method-assign]
    time.sleep(max(0.0, cluster.grace_due_in() or 0.0))
    held, failed = cluster.enforce_grace()
    assert held == [job] and not failed, (held, failed)  # seen RUNNING: the command went
    slurm.wait_state(job, "COMPLETED")
    time.sleep(1)
    info = slurm.show(job)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "0", slurm.why(job)
