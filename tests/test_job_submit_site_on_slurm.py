"""conf/slurm/job_submit.lua beside a site's own job_submit.lua, on a real slurmctld:
managed jobs are requeue-able whatever the user asks (the daemon preempts with
`scontrol requeuehold`, which Slurm refuses for a job that is not), every other job
keeps the site's default, and the merge pattern of docs/admin-guide.md section 5 (the
site's file calls ours, never replaced by it) keeps both files' rules."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parent.parent

# The pattern the admin guide shows, with the path of this cluster's copy of ours.
SITE_LUA = """\
-- The site's own job_submit.lua, calling slurm-gavel's.
dofile("{gavel}")  -- defines slurm-gavel's slurm_job_submit and slurm_job_modify ...
local gavel_submit, gavel_modify = slurm_job_submit, slurm_job_modify  -- ... kept here

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.name == "forbidden" then  -- the site's own rules first
      slurm.log_user("site: jobs may not be called 'forbidden'")
      return slurm.ERROR
   end
   -- slurm-gavel's last, so it sees the final request (hold, GPU count, requeue)
   return gavel_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   local rc = gavel_modify(job_desc, job_rec, part_list, modify_uid)
   if rc ~= slurm.SUCCESS then return rc end
   return slurm.SUCCESS  -- the site's own modify rules here
end

return slurm.SUCCESS
"""


def as_nobody(slurm, *argv: str) -> subprocess.CompletedProcess[str]:
    return slurm.as_user("nobody", *argv)


def submit(slurm, *extra: str) -> subprocess.CompletedProcess[str]:
    return as_nobody(slurm, "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null", "-p",
                     "gpu", "--begin=now+3600", *extra, "--wrap", "sleep 60")  # fmt: skip


def job_id(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def replace_lua(path: Path, text: str) -> None:
    """slurmctld reads job_submit.lua again when its mtime changes: make sure it does."""
    before = path.stat().st_mtime if path.exists() else 0.0
    path.write_text(text)
    os.utime(path, (before + 2, before + 2))


def test_managed_jobs_stay_requeue_able_and_others_keep_theirs(slurm):
    refused = submit(slurm, "--no-requeue", "--comment=gavel:type=A3C")  # explained, not overridden
    assert refused.returncode != 0 and "--no-requeue cannot be used" in refused.stderr
    managed = job_id(submit(slurm, "--comment=gavel:type=A3C"))
    plain = job_id(submit(slurm, "--no-requeue"))
    assert slurm.show(managed)["Requeue"] == "1"  # whatever the site's JobRequeue
    assert slurm.show(plain)["Requeue"] == "0"  # every other job: as its owner asked
    res = as_nobody(slurm, "scontrol", "update", f"JobId={managed}", "Requeue=0")
    assert res.returncode != 0 and slurm.show(managed)["Requeue"] == "1"
    assert as_nobody(slurm, "scontrol", "update", f"JobId={plain}", "Requeue=1").returncode == 0
    # the daemon (root here) may
    slurm.cmd("scontrol", "update", f"JobId={managed}", "Requeue=0")
    assert slurm.show(managed)["Requeue"] == "0"


@pytest.fixture
def site_lua(slurm) -> Iterator[Path]:
    """The cluster's job_submit.lua replaced by a site file calling ours (restored)."""
    lua = slurm.run_dir / "job_submit.lua"
    original = lua.read_text()
    gavel = slurm.run_dir / "gavel_job_submit.lua"
    gavel.write_text((REPO / "conf" / "slurm" / "job_submit.lua").read_text())
    replace_lua(lua, SITE_LUA.format(gavel=gavel))
    try:
        yield lua
    finally:
        replace_lua(lua, original)
        gavel.unlink()


def test_a_site_job_submit_calling_ours_keeps_both_rules(slurm, site_lua):
    res = submit(slurm, "-J", "forbidden")
    assert res.returncode != 0 and "site: jobs may not be called 'forbidden'" in res.stderr
    res = submit(slurm, "--no-requeue", "--comment=gavel:type=A3C")
    assert res.returncode != 0 and "--no-requeue cannot be used" in res.stderr
    managed = job_id(submit(slurm, "--gpus=2", "--comment=gavel:type=A3C"))
    info = slurm.show(managed)
    assert info["Priority"] == "0", info  # held on arrival
    assert info["Comment"] == "gavel:type=A3C,scale=2" and info["Requeue"] == "1", info
    res = submit(slurm, "--comment=gavel:type=A3C,weight=1000")
    assert res.returncode != 0 and "weight=1000 is above the cap 1" in res.stderr
    plain = job_id(submit(slurm, "--gpus=1"))
    assert slurm.show(plain)["Priority"] != "0"  # Slurm's own, untouched
    assert as_nobody(slurm, "scontrol", "release", managed).returncode != 0
    assert slurm.show(managed)["Priority"] == "0"
