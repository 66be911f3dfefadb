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


def _forbid_the_grammar(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def no_more(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the grammar read the comment again")

    monkeypatch.setattr(comment_grammar, "parse_comment", no_more)


@pytest.mark.parametrize("comment", ["gavel:type=A3C,grace=20", "gavel:type=A3C,scale=-1", ""])
def test_a_changed_record_of_the_same_comment_takes_its_last_reading(monkeypatch, comment):
    before = job(comment)
    first = before.reading
    _forbid_the_grammar(monkeypatch)
    moved = replace(before, state="RUNNING", nodes=("v100-1",))
    records.read_as_before(moved, before)
    assert moved.reading is first
    # another comment, another job id, or a last record never read: read anew
    for other in (replace(before, comment=comment + ",hold=user"), replace(before, job_id="6")):
        records.read_as_before(other, before)
        with pytest.raises(AssertionError, match="again"):
            _ = other.reading
    unread = replace(before, state="RUNNING")
    fresh = replace(unread, nodes=("v100-1",))
    records.read_as_before(fresh, unread)
    assert "reading" not in fresh.__dict__
    records.read_as_before(fresh, None)  # a new job
    records.read_as_before(fresh, fresh)  # the same record, reused


def test_the_backend_reads_a_job_s_comment_once_while_it_stays_the_same(monkeypatch):
    # the observe path: a job whose record changes (started, preempted) is not read
    # again; a comment changed in Slurm (scontrol update) is
    from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
    from slurm_gavel.testing import FakeSlurm, fake_backend

    slurm = FakeSlurm()
    j = slurm.submit("gavel:type=A3C")
    b = fake_backend(slurm)
    b.observe()
    real = comment_grammar.parse_comment
    _forbid_the_grammar(monkeypatch)
    place = {j: JobPlacement(j, "v100", (NodeSlice("v100-1", 1),))}
    assert b.act(RoundPlacement(0, 0.0, place)).started == (j,)
    slurm.advance(1)
    snap = b.observe()  # its record changed: running now
    assert [o.state.value for o in snap.jobs if o.job.id == j] == ["running"]
    slurm.set_comment(j, "gavel:type=A3C,scale=1")
    seen = []

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        seen.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(comment_grammar, "parse_comment", counted)
    b.observe()
    assert seen == ["gavel:type=A3C,scale=1"]
