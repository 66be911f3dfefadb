"""The safety net's full read made between rounds (SlurmCluster.between_rounds), on
each release's real Slurm: it runs only when the next observe would have read every
job, it reads every job then, and the round after it reads only what changed since."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.backend import SlurmCluster
from slurm_gavel.backends.slurm.cli.listing import IncrementalJobs

pytestmark = pytest.mark.slurm

MANAGED = ("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", "--wrap", "sleep 300")


def test_the_periodic_full_read_moves_out_of_the_round(slurm):
    slurm.cancel_all()
    try:
        jobs = [slurm.sbatch(*MANAGED) for _ in range(4)]
        b = SlurmCluster(env=slurm.env)
        b._listed = IncrementalJobs(full_every=3)
        b.between_rounds()  # before any observe: nothing to refresh, nothing run
        assert b.commands.total == 0
        b.observe()  # the first: every job's JSON ("(null)" accounts: no accounting here)
        assert b._listed.last_read == "full"
        b.observe()
        before = dict(b.commands.counts)
        b.between_rounds()  # not due yet: no command
        assert dict(b.commands.counts) == before
        b.observe()
        assert b._listed.last_read == "none"
        before = dict(b.commands.counts)
        b.between_rounds()  # due: the listing and every job's JSON, now
        ran = {k: v - before.get(k, 0) for k, v in b.commands.counts.items()}
        assert {k: v for k, v in ran.items() if v} == {"list": 1, "observe": 1}
        assert not b._listed.full_read_due()
        slurm.cmd("scontrol", "update", f"JobId={jobs[2]}", "Comment=gavel:type=A3C,scale=2")
        seen = {j.job.id: j for j in b.observe().jobs}  # the round after: no full read
        assert b._listed.last_read != "full"
        assert b._listed.last_json_jobs + b._listed.last_text_jobs == 1
        assert seen[jobs[2]].job.scale_factor == 2
        assert {j for j in jobs} <= set(seen)
    finally:
        slurm.cancel_all()
