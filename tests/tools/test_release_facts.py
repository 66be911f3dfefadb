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
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = slurm.show(job)
        if info["JobState"] == "COMPLETED":
            want = update.split("NodeList=")[1]
            assert info["NodeList"] == want or res.returncode != 0, (update, info)
            return OK if res.returncode == 0 else REFUSED
        if info["JobState"] == "PENDING" and info["Reason"] == "BadConstraints":
            return NEVER_RUNS
        time.sleep(0.2)
    raise AssertionError(f"job {job} ({gres} -> {update}) neither ran nor was refused")


def test_gres_type_updates_of_a_held_job(slurm):
    got = {case: _outcome(slurm, *case) for case in CASES}
    if slurm.release == "22.05":
        assert got == CASES
    else:
        assert got == dict.fromkeys(CASES, OK)
