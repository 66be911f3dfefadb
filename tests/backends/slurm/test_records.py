"""A Slurm job record carries its comment read once (SlurmJob.reading): every part of
the backend that needs the job's declaration (the view, the give-back, the grace, the
owner's holds) asks the record, not the grammar again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gavel.backends.slurm import records
from slurm_gavel.backends.slurm.grace import job_grace
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.domain import comment_grammar


def job(comment: str, job_id: str = "5") -> SlurmJob:
    return SlurmJob(
        job_id=job_id, state="PENDING", reason="JobHeldUser", comment=comment,
        partitions=("gpu",), nodes=(), gpu_request=None, gpu_slices=(), node_count=1,
        priority=0, restarts=0, submit_time=0, start_time=0, end_time=0, exit_code=None,
        account="", user="u",
    )  # fmt: skip


def test_the_comment_is_read_once_per_record(monkeypatch):
    sj = job("gavel:type=A3C,grace=20,hold=user")
    first = sj.reading
    assert first.spec is not None and first.user_hold and first.refusal is None

    def no_more(*a, **k):
        raise AssertionError("the grammar read the comment again")

    monkeypatch.setattr(comment_grammar, "parse_comment", no_more)
    assert sj.reading is first
    assert job_grace(sj.reading, default_s=30.0, cap_s=None).seconds == 20.0
    # a record renamed (an array task: arrays.expand_tasks) is a new record, read anew
    with pytest.raises(AssertionError, match="again"):
        _ = replace(sj, job_id="28_3").reading
    assert records.SlurmJob.reading is not None  # the descriptor, on the class


@pytest.mark.hostile
@pytest.mark.parametrize(
    "comment",
    ["gavel:type=A3C,type=A3C", "gavel:weight=1e309", "GAVEL:type=A3C", "gavel:" + "x" * 300,
     "gavel:type=\x00", "gavel:hold=user,hold=user", "gavel:steps=-1"],
)  # fmt: skip
def test_a_refused_comment_is_a_refusal_never_a_spec(comment):
    r = job(comment).reading
    assert r.spec is None and r.refusal is not None and not r.user_hold
    assert "5" in str(r.refusal)  # names the job
    # the default grace, never a user's number from a refused comment
    assert job_grace(r, default_s=30.0, cap_s=None).asked is None


def test_a_plain_comment_claims_nothing():
    r = job("just a note").reading
    assert r.spec is None and r.refusal is None
