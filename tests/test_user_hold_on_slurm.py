"""A user's hold is the user's, as job_submit.lua keeps it on a real
slurmctld of each release: `sbatch --hold` and the owner's `scontrol hold`/`uhold` of a
managed job add hold=user to its comment (the daemon never places a job so marked:
backends/slurm/view.py); the owner's `scontrol release` removes the key and leaves the
job held, now by the daemon (Slurm would otherwise start it wherever it fits). Slurm
shows both holds as JobHeldUser: the key is the only difference, and only the Lua and
the daemon's uids write it. Hostile: the owner cannot remove the key but by releasing,
cannot release the daemon's hold, and the daemon (root) cannot release the owner's."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slurm

OUT = ("-D", "/tmp", "-o", "/dev/null", "-p", "gpu")
MANAGED = "--comment=gavel:type=A3C"


def _submit(slurm, *extra: str) -> str:  # type: ignore[no-untyped-def]
    res = slurm.as_user("nobody", "sbatch", "--parsable", *OUT, *extra, "--wrap", "sleep 60")
    assert res.returncode == 0, res.stderr
    return str(res.stdout.strip().split(";")[0])


def _held(slurm, job: str) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    info = slurm.show(job)
    return info["JobState"], info["Priority"], info["Comment"]


def test_sbatch_hold_is_the_users_and_their_release_hands_the_job_to_the_daemon(slurm):
    slurm.cancel_all()
    held = _submit(slurm, MANAGED, "--hold")
    plain_managed = _submit(slurm, MANAGED)
    assert _held(slurm, held) == ("PENDING", "0", "gavel:type=A3C,hold=user"), slurm.why(held)
    assert _held(slurm, plain_managed) == ("PENDING", "0", "gavel:type=A3C")
    # the daemon's release (root) of a job its owner holds: refused, still held
    res = slurm.cmd("scontrol", "release", held, check=False)
    assert res.returncode != 0
    assert _held(slurm, held) == ("PENDING", "0", "gavel:type=A3C,hold=user")
    # the owner's release: the key goes, the job stays held (by the daemon now)
    res = slurm.as_user("nobody", "scontrol", "release", held)
    assert res.returncode == 0, res.stderr
    assert _held(slurm, held) == ("PENDING", "0", "gavel:type=A3C"), slurm.why(held)
    # a second release by the owner is the release of the daemon's hold: refused
    res = slurm.as_user("nobody", "scontrol", "release", held)
    assert res.returncode != 0
    assert _held(slurm, held) == ("PENDING", "0", "gavel:type=A3C")
    # the daemon releases a job it holds, as before
    res = slurm.cmd("scontrol", "release", plain_managed, check=False)
    assert res.returncode == 0, res.stderr
    slurm.cancel_all()


@pytest.mark.parametrize("verb", ["hold", "uhold"])
def test_the_owners_hold_of_a_waiting_managed_job_is_marked_theirs(slurm, verb):
    slurm.cancel_all()
    job = _submit(slurm, MANAGED)
    res = slurm.as_user("nobody", "scontrol", verb, job)
    assert res.returncode == 0, res.stderr
    assert _held(slurm, job) == ("PENDING", "0", "gavel:type=A3C,hold=user"), slurm.why(job)
    # holding again changes nothing (the key once)
    res = slurm.as_user("nobody", "scontrol", verb, job)
    assert _held(slurm, job)[2] == "gavel:type=A3C,hold=user"
    res = slurm.as_user("nobody", "scontrol", "release", job)
    assert res.returncode == 0, res.stderr
    assert _held(slurm, job) == ("PENDING", "0", "gavel:type=A3C")
    slurm.cancel_all()


@pytest.mark.hostile
def test_the_key_cannot_be_forged_away(slurm):
    slurm.cancel_all()
    job = _submit(slurm, MANAGED, "--hold")
    # removing the key with a comment update, alone or with a release: refused
    for argv in (
        ("Comment=gavel:type=A3C",),
        ("Comment=gavel:type=A3C", "Priority=100"),
        ("Comment=plain",),
    ):
        res = slurm.as_user("nobody", "scontrol", "update", f"JobId={job}", *argv)
        assert res.returncode != 0, argv
        assert _held(slurm, job) == ("PENDING", "0", "gavel:type=A3C,hold=user"), argv
    # a user who writes the key at submit only holds their own job
    own = _submit(slurm, "--comment=gavel:type=A3C,hold=user")
    assert _held(slurm, own) == ("PENDING", "0", "gavel:type=A3C,hold=user")
    res = slurm.cmd("scontrol", "release", own, check=False)
    assert res.returncode != 0 and _held(slurm, own)[1] == "0"
    # a malformed key is refused at submit, never read as a hold or as no hold
    res = slurm.as_user("nobody", "sbatch", *OUT, "--comment=gavel:type=A3C,hold=admin",
                        "--wrap", "true")  # fmt: skip
    assert res.returncode != 0
    # an admin (root) may still remove the key, then release the job
    res = slurm.cmd("scontrol", "update", f"JobId={own}", "Comment=gavel:type=A3C", check=False)
    assert res.returncode == 0, res.stderr
    res = slurm.cmd("scontrol", "release", own, check=False)
    assert res.returncode == 0, res.stderr
    slurm.cancel_all()


def test_the_owner_pauses_a_running_job_with_uhold_then_requeue(slurm):
    """What the user guide tells users to do instead of `scontrol requeuehold` (whose
    record is the daemon's preemption's): the hold marks the running job, which runs
    on; the requeue puts it back held, still marked."""
    slurm.cancel_all()
    job = _submit(slurm, MANAGED)
    res = slurm.cmd("scontrol", "release", job, check=False)  # the daemon's placement
    assert res.returncode == 0, res.stderr
    slurm.wait_state(job, "RUNNING")
    res = slurm.as_user("nobody", "scontrol", "uhold", job)
    assert res.returncode == 0, res.stderr
    assert slurm.show(job)["Comment"] == "gavel:type=A3C,hold=user", slurm.why(job)
    assert slurm.state(job) == "RUNNING"
    res = slurm.as_user("nobody", "scontrol", "requeue", job)
    assert res.returncode == 0, res.stderr
    slurm.wait_state(job, "PENDING", timeout=60)
    assert _held(slurm, job) == ("PENDING", "0", "gavel:type=A3C,hold=user"), slurm.why(job)
    slurm.cancel_all()
