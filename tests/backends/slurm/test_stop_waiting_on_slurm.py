"""A daemon stopping mid-act (SIGTERM) ends the act's wait for a preempted job at once
(the round waited out the job's grace, up to minutes, and a service manager's
stop timeout killed it before the acted round was logged), on the real cluster of each
release. The job is left running, signalled, and not requeue-held (its grace is not
over); its move fails with the reason."""

from __future__ import annotations

import threading
import time

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement

pytestmark = pytest.mark.slurm

GRACE_S = 120.0


def on(round_index: int, job: str, node: str) -> RoundPlacement:
    gpu = node.split("-")[0]
    return RoundPlacement(
        round_index, time.time(), {job: JobPlacement(job, gpu, (NodeSlice(node, 1),))}
    )


def test_a_stopping_daemon_ends_the_acts_wait_for_a_moving_job(slurm):
    slurm.cancel_all()
    job = slurm.sbatch_ignoring_the_signal()
    b = cli_backend(env=slurm.env, grace_s=GRACE_S)
    b.observe()
    assert b.act(on(0, job, "v100-1")).started == (job,)
    slurm.wait_state(job, "RUNNING")
    b.observe()
    stop = threading.Timer(2.0, b.stop_waiting)  # what the daemon's SIGTERM handler calls
    stop.start()
    t0 = time.monotonic()
    try:
        res = b.act(on(1, job, "p100-1"))  # a move: the act waits for the job to leave
    finally:
        stop.cancel()
    took = time.monotonic() - t0
    assert took < 15, took  # not its 120-s grace
    why = dict(res.failed).get(job, "")
    assert res.moved == () and why.startswith("the daemon is stopping"), res
    assert slurm.state(job) == "RUNNING" and slurm.show(job)["Restarts"] == "0"
    assert b.transport.commands.counts["requeuehold"] == 0
    assert b.transport.commands.counts["signal"] == 1
    slurm.cancel_all()
