"""Which signals an observe forgets (Preemption.forget_reruns): only those another daemon
sent (restored at a takeover) for a run that began after them. This daemon's own signal
can go out within the second its run started, as Slurm counts start times in whole
seconds; forgetting it signalled the run again instead of requeue-holding it at its grace
end (24.11 and 26.05 under CI's load: test_backend's ignored-signal tests)."""

from __future__ import annotations

from dataclasses import replace

from slurm_gavel.backends.slurm.preemption import Preemption
from slurm_gavel.backends.slurm.records import SlurmJob

START = 1_000


def running(job_id: str, start: int = START) -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state="RUNNING", reason="None", comment="gavel:type=A3C",
        partitions=("gpu",), nodes=("v100-1",), gpu_request=None, gpu_slices=(), node_count=1,
        priority=1, restarts=0, submit_time=0, start_time=start, end_time=0, exit_code=None,
        account="", user="u",
    )  # fmt: skip


def preemption() -> Preemption:
    return Preemption(
        None,  # type: ignore[arg-type]  # forget_reruns sends nothing
        grace_s=1.0, max_grace_s=None, checkpoint_signal="USR1", fresh_run_s=0.0,
        poll_s=0.1, clock=lambda: START + 0.4,
    )  # fmt: skip


def test_its_own_signal_in_the_second_the_run_started_is_kept():
    p = preemption()
    p.signal_sent["7"], p.signalled["7"] = START + 0.4, START + 1.4  # as signal() records it
    p.stopped_runs.add("7")
    p.forget_reruns({"7": running("7")})
    assert p.signal_sent == {"7": START + 0.4} and "7" in p.stopped_runs


def test_a_restored_signal_for_a_run_begun_after_it_is_forgotten():
    p = preemption()
    p.signal_sent["7"], p.signalled["7"] = START - 60.0, START - 30.0
    p.stopped_runs.add("7")
    p.restored.add("7")
    p.forget_reruns({"7": running("7")})  # this run started a minute after the signal
    assert "7" not in p.signal_sent and "7" not in p.stopped_runs and not p.restored
    # one for a run older than it stays (the run that was signalled)
    p.signal_sent["8"], p.restored = START + 5.0, {"8"}
    p.forget_reruns({"8": replace(running("8"), start_time=START)})
    assert "8" in p.signal_sent
