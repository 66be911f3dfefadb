"""A refusal's reason reaches users of every release: Slurm 22.05's
scontrol prints job_submit.lua's refusals as "Unspecified error" without the reason
(24.11+ print it); the Lua also writes each user's last refusal to REFUSALS_DIR/<uid>,
which `slurm-gavel refused` prints to that user. Hostile values stay one bounded,
printable line."""

from __future__ import annotations

import pwd
import subprocess
import sys

import pytest
from spank_free_client import spank_free_conf

from slurm_gavel.commands.refused import read_refusal

pytestmark = pytest.mark.slurm

OUT = ("-o", "/dev/null")


def lua_only(slurm) -> str:  # type: ignore[no-untyped-def]
    """SLURM_CONF=... for a client that loads no SPANK plugin. In the full suite the
    session cluster loads ours, which refuses a malformed comment in sbatch itself: the
    Lua, whose refusal record this test reads, never sees it."""
    return f"SLURM_CONF={spank_free_conf(slurm)}"


def test_a_refused_update_and_submission_are_on_record_for_their_user(slurm):
    slurm.cancel_all()
    folder = slurm.run_dir / "refused"
    nobody = pwd.getpwnam("nobody").pw_uid
    client = lua_only(slurm)
    try:
        res = slurm.as_user(
            "nobody", "sbatch", "--parsable", "-D", "/tmp", *OUT, "-p", "gpu",
            "--comment=gavel:type=A3C", "--wrap", "sleep 60",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().split(";")[0]
        # the owner's release of a managed job: refused
        res = slurm.as_user("nobody", "scontrol", "release", job)
        assert res.returncode != 0
        if slurm.release == "22.05":
            assert "releases it when it places it" not in res.stderr  # what 22.05 hides
        got = read_refusal(folder, nobody)
        assert got is not None and f"job {job} is managed" in got[1], got
        assert "releases it when it places it" in got[1]
        # a refused submission replaces it, one line, control characters replaced
        res = slurm.as_user(
            "nobody", "env", client, "sbatch", "-D", "/tmp", *OUT, "-p", "gpu",
            "--comment=gavel:type=A\x01B\nC", "--wrap", "true",
        )  # fmt: skip
        assert res.returncode != 0
        got = read_refusal(folder, nobody)
        assert got is not None and "job type has a character" in got[1], got
        assert got[1].isprintable() and len(got[1]) <= 1000
        raw = (folder / str(nobody)).read_bytes()
        assert raw.count(b"\n") == 1 and b"\x01" not in raw
        # the command, for the caller's own uid (root here)
        res = slurm.cmd("env", client, "sbatch", *OUT, "-p", "gpu", "--comment=gavel:type=A3C",
                        "-w", "v100-1", "--wrap", "true", check=False)  # fmt: skip
        assert res.returncode != 0
        cli = subprocess.run(
            [sys.executable, "-m", "slurm_gavel", "refused", "--dir", str(folder)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cli.returncode == 0 and "--nodelist/-w cannot be used" in cli.stdout, cli
    finally:
        slurm.cancel_all()
