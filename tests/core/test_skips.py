"""Why the round leaves a job out (core/skips.py): each cause its code, and the owner's
sentence fixed per code, never the user's own text."""

from __future__ import annotations

import pytest

from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import considered_jobs
from slurm_gavel.core.skips import SkipCode, owner_sentence
from slurm_gavel.domain.cluster_model import Allowed, JobState, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
KNOWN = "ResNet-18 (batch size 64)"


def _waiting(job_id: str, job_type: str = KNOWN, gpus: int = 1, **kw) -> ObservedJob:
    job = Job(id=job_id, job_type=job_type, scale_factor=gpus)
    return ObservedJob(job=job, state=JobState.PENDING, **kw)


def test_each_cause_has_its_code():
    jobs = [
        _waiting("ok"),
        _waiting("slurm", waiting_on="it waits for its dependency afterok:5(unfulfilled)"),
        _waiting("unknown", job_type="a model nobody profiled"),
        _waiting("scale", gpus=3),  # the table has 1, 2, 4 and 8 GPUs
        _waiting("big", gpus=8),
        _waiting("fits", allowed=Allowed(frozenset(), frozenset(), "constraint nvlink on no node")),
    ]
    considered, skipped = considered_jobs(jobs, SchedulerConfig(table=TABLE), {"v100": 4})
    assert [o.job.id for o, _ in considered] == ["ok"]
    codes = {j: s.code for j, s in skipped}
    assert codes == {
        "slurm": SkipCode.WAITING_ON_CLUSTER,
        "unknown": SkipCode.UNKNOWN_TYPE,
        "scale": SkipCode.NO_FIGURES_AT_SCALE,
        "big": SkipCode.TOO_BIG,
        "fits": SkipCode.NO_NODE_FITS,
    }
    detail = dict(skipped)["unknown"].detail
    assert "a model nobody profiled" in detail  # the admin's log names it


@pytest.mark.hostile
@pytest.mark.parametrize(
    "code", [c.value for c in SkipCode if c is not SkipCode.WAITING_ON_CLUSTER]
)
def test_the_owner_never_sees_the_detail_but_slurms_own_words(code):
    hostile = "'; scontrol release 1; <script> \x1b[31m gavel:type=x"
    told = owner_sentence(code, hostile, 2)
    assert told.startswith("not scheduled: ") and "scontrol" not in told and "\x1b" not in told
    # a code the status file does not know (an older or edited file) reads as OTHER
    assert owner_sentence("no-such-code", hostile, 2) == owner_sentence(SkipCode.OTHER, "", 2)
    slurm = "it waits for its dependency afterok:5(unfulfilled)"
    assert owner_sentence(SkipCode.WAITING_ON_CLUSTER, slurm, 1) == "not scheduled: " + slurm
