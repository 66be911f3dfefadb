"""The safety net's full read made between rounds (SlurmBackend.between_rounds), on
each release's real Slurm: it runs only when the next observe would have read every
job, it reads every job then, and the round after it reads only what changed since."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.cli.listing import IncrementalJobs
from slurm_gavel.backends.slurm.cli.transport import cli_backend

pytestmark = pytest.mark.slurm

MANAGED = ("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", "--wrap", "sleep 300")


def test_the_periodic_full_read_moves_out_of_the_round(slurm):
    slurm.cancel_all()
    try:
        jobs = [slurm.sbatch(*MANAGED) for _ in range(4)]
        b = cli_backend(env=slurm.env)
        b.transport.reader.listed = IncrementalJobs(full_every=3)
        b.between_rounds()  # before any observe: nothing to refresh, nothing run
        assert b.transport.commands.total == 0
        b.observe()  # the first: every job's JSON ("(null)" accounts: no accounting here)
        assert b.transport.reader.listed.last_read == "full"
        b.observe()
        before = dict(b.transport.commands.counts)
        b.between_rounds()  # not due yet: no command
        assert dict(b.transport.commands.counts) == before
        b.observe()
        assert b.transport.reader.listed.last_read == "none"
        before = dict(b.transport.commands.counts)
        b.between_rounds()  # due: the listing (22.05: and its second) and every job's JSON
        ran = {k: v - before.get(k, 0) for k, v in b.transport.commands.counts.items()}
        lists = 2 if slurm.release == "22.05" else 1
        assert {k: v for k, v in ran.items() if v} == {"list": lists, "observe": 1}
        assert not b.transport.reader.listed.full_read_due()
        slurm.cmd("scontrol", "update", f"JobId={jobs[2]}", "Comment=gavel:type=A3C,scale=2")
        seen = {j.job.id: j for j in b.observe().jobs}  # the round after: no full read
        assert b.transport.reader.listed.last_read != "full"
        assert (
            b.transport.reader.listed.last_json_jobs + b.transport.reader.listed.last_text_jobs == 1
        )
        assert seen[jobs[2]].job.scale_factor == 2
        assert {j for j in jobs} <= set(seen)
    finally:
        slurm.cancel_all()
