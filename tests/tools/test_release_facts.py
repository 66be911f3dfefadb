"""What differs between Slurm releases, checked on each release's real daemons (the
admin guide's "Supported Slurm releases" table says the same).

Placement: the daemon sets a held job's GPUs with an untyped ``Gres=gpu:G`` plus
``NodeList=`` because on 22.05 a typed update is refused or makes the job never
runnable; from 24.11 on, typed updates work in every direction. The untyped form
works on every release, which is why the daemon keeps it.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slurm

OK, REFUSED, NEVER_RUNS = "ok", "refused", "never runs"
# (submitted GRES, update) -> outcome on 22.05; every later release: OK.
CASES = {
    ("", "gres=gpu:v100:1 NodeList=v100-1"): OK,
    ("--gres=gpu:1", "gres=gpu:k80:1 NodeList=k80-1"): REFUSED,
    ("--gres=gpu:v100:2", "gres=gpu:k80:1 NodeList=k80-1"): NEVER_RUNS,
    ("--gres=gpu:v100:2", "gres=gpu:1 NodeList=k80-1"): REFUSED,
    ("--gres=gpu:2", "gres=gpu:1 NodeList=k80-1"): OK,  # what the daemon does
}


def _outcome(slurm, gres: str, update: str) -> str:
    args = [gres] if gres else []
    job = slurm.sbatch("--hold", "-p", "gpu", "-o", "/dev/null", *args, "--wrap", "true")
    res = slurm.cmd("scontrol", "update", f"JobId={job}", *update.split(), check=False)
    slurm.cmd("scontrol", "release", job)
    deadline = time.monotonic() + 60  # a node freed by the test before may still be cleaning up
    while time.monotonic() < deadline:
        info = slurm.show(job)
        if info["JobState"] == "COMPLETED":
            want = update.split("NodeList=")[1]
            assert info["NodeList"] == want or res.returncode != 0, (update, info)
            return OK if res.returncode == 0 else REFUSED
        if info["JobState"] == "PENDING" and info["Reason"] == "BadConstraints":
            return NEVER_RUNS
        time.sleep(0.2)
    nodes = slurm.cmd("sinfo", "-h", "-N", "-o", "%N %T %E", check=False).stdout
    raise AssertionError(
        f"job {job} ({gres} -> {update}) neither ran nor was refused: {slurm.why(job)}"
        f"\nnodes:\n{nodes}{slurm.log_lines(job)}"
    )


def test_gres_type_updates_of_a_held_job(slurm):
    got = {case: _outcome(slurm, *case) for case in CASES}
    if slurm.release == "22.05":
        assert got == CASES
    else:
        assert got == dict.fromkeys(CASES, OK)


def test_requeue_exit_hold_and_requeuehold_on_plain_jobs(slurm):
    """What RequeueExitHold=99 and JobRequeue do to jobs that are not slurm-gavel's
    (admin guide section 3): a plain job exiting 99 is requeued held; a --no-requeue
    one too on 22.05, while from 24.11 on it ends FAILED as any other failure. And
    `scontrol requeuehold` (the daemon's preemption) is refused for a --no-requeue job
    on every release, which is why job_submit.lua makes managed jobs requeue-able."""
    requeue = slurm.sbatch("--requeue", "-p", "gpu", "-o", "/dev/null", "--wrap", "exit 99")
    no_requeue = slurm.sbatch("--no-requeue", "-p", "gpu", "-o", "/dev/null", "--wrap", "exit 99")
    ordinary = slurm.sbatch("-p", "gpu", "-o", "/dev/null", "--wrap", "exit 3")
    slurm.wait_state(requeue, "SPECIAL_EXIT", timeout=60)
    info = slurm.show(requeue)
    assert info["Restarts"] == "1" and info["Priority"] == "0", info
    want = "SPECIAL_EXIT" if slurm.release == "22.05" else "FAILED"
    slurm.wait_state(no_requeue, want, timeout=60)
    slurm.wait_state(ordinary, "FAILED", timeout=60)  # other exit codes: unchanged

    runs = slurm.sbatch("--no-requeue", "-p", "gpu", "-o", "/dev/null", "--wrap", "sleep 300")
    slurm.wait_state(runs, "RUNNING", timeout=60)
    res = slurm.cmd("scontrol", "requeuehold", runs, check=False)
    assert res.returncode != 0 and "disabled" in (res.stdout + res.stderr), res
    assert slurm.state(runs) == "RUNNING"
