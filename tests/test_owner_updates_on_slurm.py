"""Nothing a job's owner may write starts a held managed job, as job_submit.lua keeps it
on a real slurmctld of each release, with no daemon running.

Slurm recomputes the priority of a held job (priority 0) in two places an unprivileged
owner can reach through `scontrol update` (src/slurmctld/job_mgr.c, 22.05 to 26.05):

* a nice change under priority/basic: priority = MAX(0 + old nice - new nice, 2), so
  `scontrol update JobId=N Nice=5` released the job and backfill started it on its own;
* any update of a job Slurm held itself as never runnable (BadConstraints: the daemon
  placed it where it cannot run), when the update names no priority.

The first is refused for managed jobs (the scheduler does not read nice); the second is
closed by the Lua naming the priority the job has (0) in such an update. Every other
field an owner may change on a pending job (time, begin, partition, QOS, account,
nodes, memory, GRES, dependency, ...) leaves the priority alone, and `scontrol top`
skips held jobs: each is tried here and the job must stay held. Jobs are submitted as
the unprivileged user `nobody`; root plays the daemon.
"""

from __future__ import annotations

import pwd
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from slurm_gavel.commands.refused import read_refusal

pytestmark = pytest.mark.slurm

OUT = ("-D", "/tmp", "-o", "/dev/null", "-p", "gpu")
MANAGED = "--comment=gavel:type=A3C"
# Longer than the local cluster's backfill interval (bf_interval=5) and main pass.
SCHEDULER_PASS_S = 7.0


def _submit(slurm, *extra: str) -> str:  # type: ignore[no-untyped-def]
    res = slurm.as_user("nobody", "sbatch", "--parsable", *OUT, *extra, "--wrap", "sleep 300")
    assert res.returncode == 0, res.stderr
    return str(res.stdout.strip().split(";")[0])


def _held(slurm, job: str) -> bool:  # type: ignore[no-untyped-def]
    info = slurm.show(job)
    return info["JobState"] == "PENDING" and info["Priority"] == "0"


def _reason(slurm, res) -> str:  # type: ignore[no-untyped-def]
    """What the owner can read of a refusal: scontrol's own words (24.11+) and the
    record `slurm-gavel refused` prints (every release)."""
    got = read_refusal(slurm.run_dir / "refused", pwd.getpwnam("nobody").pw_uid)
    return res.stderr + (got[1] if got else "")


@pytest.mark.hostile
@pytest.mark.parametrize("hold", [(), ("--hold",)], ids=["daemon-held", "owner-held"])
def test_a_nice_value_never_starts_a_held_managed_job(slurm, hold):
    slurm.cancel_all()
    job = _submit(slurm, MANAGED, *hold)
    for nice in ("5", "1", "0", "2147483645", "-5"):
        res = slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", f"Nice={nice}")
        assert res.returncode != 0, (nice, slurm.why(job))
        assert _held(slurm, job), (nice, slurm.why(job))
    res = slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", "Nice=5")
    why = _reason(slurm, res)
    assert f"job {job} is managed by the gavel scheduler: a nice value" in why, why
    assert "--gavel-priority" in why and f"scontrol hold {job}" in why, why
    time.sleep(SCHEDULER_PASS_S)
    assert _held(slurm, job), slurm.why(job)
    assert slurm.show(job)["Nice"] == "0"
    # a plain job's nice stays its owner's business
    plain = _submit(slurm, "--hold")
    res = slurm.as_user("nobody", "scontrol", "update", f"JobId={plain}", "Nice=5")
    assert res.returncode == 0, res.stderr
    assert slurm.show(plain)["Nice"] == "5"


# Every field an owner may write on a pending job (scontrol update), some of
# which Slurm refuses itself (Contiguous, Deadline, Licenses, an unknown feature or
# reservation): refused or not, none may release the job.
OWNER_UPDATES = [
    ("Nice=5",),
    ("Priority=1",),
    ("Priority=100000",),
    ("TimeLimit=10",),
    ("StartTime=now",),
    ("EligibleTime=now",),
    ("StartTime=now+3600",),
    ("Partition=v100",),
    ("Partition=gpu",),
    ("QOS=normal",),
    ("Account=root",),
    ("Reservation=none",),
    ("NumNodes=1",),
    ("NumTasks=1",),
    ("MinCPUsNode=1",),
    ("MinMemoryNode=100",),
    ("Gres=gpu:1",),
    ("TresPerNode=gres/gpu:1",),
    ("Features=foo",),
    ("ExcNodeList=k80-1",),
    ("ReqNodeList=k80-1",),
    ("Dependency=",),
    ("Name=renamed",),
    ("WCKey=x",),
    ("Requeue=1",),
    ("Contiguous=1",),
    ("Deadline=now+3600",),
    ("Licenses=x",),
    ("OverSubscribe=yes",),
    ("TimeLimit=20", "StartTime=now", "Partition=gpu"),
]
OWNER_COMMANDS = [
    ("scontrol", "top", "{job}"),
    ("scontrol", "release", "{job}"),
    ("scontrol", "requeue", "{job}"),
    ("scontrol", "requeuehold", "{job}"),
    ("scontrol", "resume", "{job}"),
    ("scontrol", "uhold", "{job}"),
    ("scontrol", "release", "{job}"),  # the owner's own hold: back to the daemon's
    ("scontrol", "release", "{job}"),  # the daemon's: refused
]


@pytest.mark.hostile
def test_no_owner_update_or_command_releases_a_held_managed_job(slurm):
    slurm.cancel_all()
    job = _submit(slurm, MANAGED)
    for fields in OWNER_UPDATES:
        slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", *fields)
        assert _held(slurm, job), (fields, slurm.why(job))
    for argv in OWNER_COMMANDS:
        slurm.as_user("nobody", *(a.format(job=job) for a in argv))
        assert _held(slurm, job), (argv, slurm.why(job))
    time.sleep(SCHEDULER_PASS_S)
    assert _held(slurm, job), slurm.why(job)
    # the daemon (root here) still places it: its own updates, then its release
    for fields in (("ReqNodeList=", "ExcNodeList="), ("NumNodes=1",), ("StartTime=now",)):
        res = slurm.cmd("scontrol", "update", f"JobId={job}", *fields, check=False)
        assert res.returncode == 0, (fields, res.stderr)
    res = slurm.cmd("scontrol", "release", job, check=False)
    assert res.returncode == 0, res.stderr
    slurm.wait_state(job, "RUNNING")


@pytest.mark.hostile
def test_a_job_slurm_found_never_runnable_stays_held_through_its_owners_update(slurm):
    """The daemon's placement may leave a job Slurm calls never runnable (priority 0,
    BadConstraints); Slurm then recomputes its priority at any update that names none.
    Here the owner's exclusion of every node makes it so, and the owner's update
    removing the exclusion would have started it on its own."""
    slurm.cancel_all()
    every = ",".join(name for name, _ in slurm.spec.node_names())
    job = _submit(slurm, MANAGED, f"--exclude={every}")
    res = slurm.cmd("scontrol", "release", job, check=False)  # the daemon's placement
    assert res.returncode == 0, res.stderr
    deadline = time.monotonic() + 60
    while slurm.show(job)["Reason"] != "BadConstraints" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.show(job)["Reason"] == "BadConstraints", slurm.why(job)
    assert _held(slurm, job), slurm.why(job)
    res = slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", "ExcNodeList=")
    assert res.returncode == 0, res.stderr  # the change itself is the owner's to make
    assert slurm.show(job)["ExcNodeList"] == "(null)"
    assert _held(slurm, job), slurm.why(job)
    res = slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", "TimeLimit=30")
    assert res.returncode == 0, res.stderr
    time.sleep(SCHEDULER_PASS_S)
    assert _held(slurm, job), slurm.why(job)
    # the daemon's next placement releases it, and it runs
    res = slurm.cmd("scontrol", "release", job, check=False)
    assert res.returncode == 0, res.stderr
    slurm.wait_state(job, "RUNNING")


def test_nice_at_submit_leaves_the_job_held_until_the_daemon_places_it(slurm):
    slurm.cancel_all()
    job = _submit(slurm, MANAGED, "--nice=100")
    time.sleep(SCHEDULER_PASS_S)
    assert _held(slurm, job), slurm.why(job)
    assert slurm.show(job)["Nice"] == "100"
    res = slurm.cmd("scontrol", "release", job, check=False)
    assert res.returncode == 0, res.stderr
    slurm.wait_state(job, "RUNNING")


HETJOB = "#!/bin/bash\n#SBATCH -p gpu\n#SBATCH hetjob\n#SBATCH -p gpu\nsleep 1\n"


def test_a_heterogeneous_job_is_refused_as_one(slurm):
    slurm.cancel_all()
    folder = Path(tempfile.mkdtemp(prefix="gavel-het-", dir="/tmp"))  # nobody reads it
    folder.chmod(0o755)
    script = folder / "het.sh"
    script.write_text(HETJOB)
    script.chmod(0o644)
    for argv in (
        (MANAGED, str(script)),
        (MANAGED, "-p", "gpu", "--wrap", "sleep 1", ":", "-p", "gpu"),
        ("-p", "gpu", "--wrap", "sleep 1", ":", "-p", "gpu", MANAGED),
    ):
        res = slurm.as_user("nobody", "sbatch", "-D", "/tmp", "-o", "/dev/null", *argv)
        assert res.returncode != 0, argv
        why = _reason(slurm, res)
        assert "heterogeneous jobs cannot be managed" in why, (argv, why)
        assert "submit each component as a job of its own" in why, why
        assert "salloc and srun" not in why, why
    # a plain heterogeneous job is Slurm's, as ever
    res = slurm.as_user("nobody", "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null",
                        str(script))  # fmt: skip
    assert res.returncode == 0, res.stderr
    shutil.rmtree(folder)
