"""Held jobs the daemon cannot use go back to Slurm (backends/slurm_giveback.py): pure
parts here, on the real cluster in tests/daemon/test_giveback_on_slurm.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.from_json import parse_jobs
from slurm_gavel.backends.slurm.giveback import (
    RELEASED_PREFIX,
    GiveBack,
    give_back_orders,
    gres_back,
    refused_held,
    released_comment,
    scale_in,
)
from slurm_gavel.domain.comment_grammar import classify

DATA = Path(__file__).parents[1] / "data" / "22.05"


def held_job():
    _, jobs = parse_jobs(json.loads((DATA / "squeue.json").read_text()))
    job = next(j for j in jobs if j.comment.startswith("gavel:") and j.state == "PENDING")
    assert job.held
    return job


@pytest.mark.hostile
@pytest.mark.parametrize(
    "reason",
    ['unknown job type "x"', "a\nb\x1b[31m\x00", "\u202e" * 50, "x" * 5000, '\\"; scancel 1'],
)
def test_released_comment_is_plain_printable_bounded_and_quote_free(reason):
    comment = released_comment(reason)
    assert comment.startswith(RELEASED_PREFIX)
    assert classify(comment) == "plain"  # no enforcer claims the job again
    assert all(" " <= c <= "~" for c in comment) and '"' not in comment and "\\" not in comment
    assert len(comment.encode()) < 1024  # Slurm's own limit
    argv = GiveBack("7", comment, "gpu:2").argv()
    assert argv == ["scontrol", "update", "JobId=7", f"Comment={comment}", "Gres=gpu:2"]


def test_gres_back_per_node_when_it_divides():
    assert gres_back(4, 2) == "gpu:2"
    assert gres_back(4, 0) == "gpu:4"
    assert gres_back(3, 2) is None
    assert gres_back(None, 1) is None


@pytest.mark.hostile
def test_scale_is_read_from_a_refused_comment_for_the_gpus_only():
    assert scale_in("gavel:type=A3C,scale=2,weight=inf") == 2
    assert scale_in("gavel:scale=4,type=\x1b") == 4
    for comment in ("gavel:type=A3C,scale=0x10", "gavel:type=A3C,scale=5000", "x,scale=2 ",
                    "gavel:type=A3C,xscale=2", "gavel:type=A3C,scale=02"):  # fmt: skip
        assert scale_in(comment) is None, comment


def test_refused_held_finds_held_jobs_with_a_comment_the_grammar_refuses():
    job = held_job()
    ok = job
    bad = replace(job, job_id="90", comment="gavel:type=A3C,scale=0x10")
    near = replace(job, job_id="91", comment=" gavel:type=A3C")
    running = replace(job, job_id="92", comment="gavel:type=inf,weight=inf", state="RUNNING")
    plain = replace(job, job_id="93", comment="my notes")
    capped = replace(job, job_id="94", comment="gavel:type=A3C,weight=1000")  # clamped, kept
    found = refused_held([ok, bad, near, running, plain, capped], None)
    assert set(found) == {"90", "91"}
    assert "scale=" in found["90"] and "must open the comment" in found["91"]


def test_held_jobs_outside_the_managed_partitions_are_given_back_with_the_reason():
    """A held managed job its owner moved to a partition the daemon does not
    manage (or submitted there) waited forever; it goes back to Slurm as a plain job."""
    job = replace(held_job(), partitions=("debug",))
    running = replace(job, job_id="92", state="RUNNING")
    plain = replace(job, job_id="93", comment="my notes")
    inside = replace(job, job_id="94", partitions=("gpu",))
    both = replace(job, job_id="95", partitions=("debug", "gpu"))
    found = refused_held([job, running, plain, inside, both], ["gpu", "v100"])
    assert set(found) == {job.job_id}
    why = found[job.job_id]
    assert "partition debug is not managed" in why and "it manages gpu,v100" in why
    assert refused_held([job], None) == {}  # None manages every partition
    (order,) = give_back_orders(found, {job.job_id: job}, {})
    assert order.comment.startswith(RELEASED_PREFIX + "partition debug")
    assert classify(order.comment) == "plain"


def test_orders_only_for_jobs_still_waiting():
    job = held_job()
    jobs = {job.job_id: job, "5": replace(job, job_id="5", state="RUNNING")}
    orders = give_back_orders({job.job_id: "unknown job type", "5": "x", "6": "y"}, jobs, {})
    assert [o.job_id for o in orders] == [job.job_id]
