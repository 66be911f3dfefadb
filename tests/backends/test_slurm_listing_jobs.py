"""Jobs built from the listing text (slurm_listing_jobs.py), replayed from two rounds
captured on each real release (tests/backends/test_slurm_listing_jobs_on_slurm.py with
SLURM_GAVEL_CAPTURE_LISTING=1: held, released, running on 1, 2 and 2x2 GPUs,
untyped, checkpointed (exit 99), requeue-held, hostile comments), then with hostile
values written into the text."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm_job_listing import LISTING_FIELDS, Record, parse_listing
from slurm_gavel.backends.slurm_json import parse_jobs
from slurm_gavel.backends.slurm_listing_jobs import job_from_listing
from slurm_gavel.backends.slurm_records import SlurmJob

DATA = Path(__file__).parent / "data"
RELEASES = ["22.05", "24.11", "26.05"]
AT = {name: i for i, name in enumerate(LISTING_FIELDS)}


def load(release: str, name: str) -> tuple[dict[str, Record], dict[str, SlurmJob]]:
    where = DATA / release / "listing-jobs"
    raw = (where / f"{name}.txt").read_bytes().decode("utf-8", "surrogateescape")
    text = raw.replace("\r\n", "\n").replace("\r", "\n")  # as SlurmCommands decodes it
    listing = parse_listing(text, (where / f"{name}.token").read_text())
    doc = json.loads((where / f"{name}.json").read_bytes().decode("utf-8", "surrogateescape"))
    assert listing is not None
    return listing, {j.job_id: j for j in parse_jobs(doc)[1]}


def rounds(release: str):
    (l1, j1), (l2, j2) = load(release, "round1"), load(release, "round2")
    last = {j: (r, j1[j]) for j, r in l1.items() if j in j1}
    return last, l2, j2


def users(release: str) -> dict[int, str]:
    """The user names round 1's JSON gave (what IncrementalJobs passes)."""
    return {j.user_id: j.user for j in load(release, "round1")[1].values() if j.user_id is not None}


def with_value(record: Record, field: str, value: str) -> Record:
    out = list(record)
    out[AT[field]] = value
    return tuple(out)


@pytest.mark.parametrize("release", RELEASES)
def test_every_job_built_from_text_is_the_one_its_json_gives(release):
    last, listing, jobs = rounds(release)
    built = {}
    for job_id, record in listing.items():
        got = job_from_listing(record, last.get(job_id), users(release))
        if got is not None:
            assert got == jobs[job_id], job_id
            built[job_id] = got
    states = {j.state for j in built.values()}
    assert {"PENDING", "RUNNING", "SPECIAL_EXIT"} <= states
    assert any(j.reason == "JobHeldUser" and j.restarts for j in built.values())  # requeue-held
    assert any(len(j.gpu_slices) == 2 for j in built.values())  # 2 nodes, kept
    assert len(built) >= 20 and len(built) < len(listing)  # some are read as JSON
    # a new job: built where its account and QOS are named (sbatch -A --qos), not
    # "(null)" (22.05 without slurmdbd drops --qos)
    named = [] if release == "22.05" else ["gavel-acct"]
    assert [j.account for j in built.values() if j.job_id not in last] == named
    for record in listing.values():
        if record[AT["account"]] == "(null)":
            assert job_from_listing(record, None, users(release)) is None


def held_job(release: str) -> tuple[Record, tuple[Record, SlurmJob], SlurmJob]:
    """A job held on arrival and seen last round, built from text, with a plain
    comment."""
    last, listing, _ = rounds(release)
    for job_id, record in listing.items():
        if job_id not in last:
            continue
        got = job_from_listing(record, last[job_id], users(release))
        if got is not None and got.held and got.restarts == 0 and got.comment == "gavel:type=A3C":
            return record, last[job_id], got
    raise AssertionError("no held managed job captured")


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("comment", "(null)"),  # unset, or a user's "(null)": not the last one either
        ("comment", "a\nb"),  # or "a\r\nb" before universal newlines
        ("account", "(null)"),
        ("qos", "(null)"),
        ("account", "two words"),
        ("job_state", "PENDING "),
        ("job_state", "BOGUS"),
        ("job_state", "COMPLETED"),  # not a state the listing asks for
        ("priority", "12x"),
        ("priority", "-1"),
        ("priority", ""),
        ("submit_time", "2026-11-26T16:07:14"),  # a time not printed as epoch seconds
        ("start_time", "Unknown"),
        ("eligible_time", "NONE"),
        ("exit_code", "0:x"),
        ("exit_code", "N/A"),
        ("state_reason", "a description slurmctld wrote"),
        ("tres_per_node", "gres/gpu:1 x"),
        ("tres_per_node", ""),
        ("user_id", "1001"),  # user_name follows user_id: only in the JSON
        ("node_count", "1-2"),
        ("nodes", "v100-1"),  # a pending job... as long as it has nodes: see below
        ("job_id", "99999"),  # the last round's job is another's
    ],
)
def test_a_value_the_text_cannot_say_exactly_is_read_as_json(release, field, value):
    record, last, _ = held_job(release)
    if last[0][AT[field]] == value:  # "(null)" last round too would be kept: not now
        last = (with_value(last[0], field, "other"), last[1])
    changed = with_value(record, field, value)
    if field == "nodes":  # a pending job's nodes say no slices; a running one's do
        changed = with_value(changed, "job_state", "RUNNING")
    assert job_from_listing(changed, last, users(release)) is None


@pytest.mark.hostile
@pytest.mark.parametrize("release", RELEASES)
def test_hostile_comments_are_kept_as_text_or_left_to_json(release):
    record, last, job = held_job(release)
    token_like = "|0123456789abcdef|PENDING|0|(null)"
    for comment in [token_like, "N/A", "", "  spaced  ", "bad\udcff\udcfe", "x\tJobHeldUser"]:
        got = job_from_listing(with_value(record, "comment", comment), last, users(release))
        assert got == replace(job, comment=comment)
    # "(null)" and a newline are kept only while the text is the last round's
    for comment, json_value in [("(null)", ""), ("(null)", "(null)"), ("a\nb", "a\r\nb")]:
        before = (with_value(last[0], "comment", comment), replace(last[1], comment=json_value))
        now = with_value(with_value(record, "comment", comment), "priority", "7")
        got = job_from_listing(now, before, users(release))
        assert got == replace(job, comment=json_value, priority=7)
    # "job requeued in held state" is JobHeldUser only for a held job (priority 0)
    described = with_value(record, "state_reason", "job requeued in held state")
    assert job_from_listing(described, last, users(release)) == replace(job, reason="JobHeldUser")
    assert job_from_listing(with_value(described, "priority", "5"), last, users(release)) is None
    assert job_from_listing(record[:-1], last, users(release)) is None  # a field short


@pytest.mark.parametrize("release", RELEASES)
def test_a_running_job_keeps_its_gpus_only_while_it_is_the_same_run(release):
    """gres_detail (which GPUs of a node) is in the JSON only: a run restarted on the
    same node may hold other GPUs there."""
    last, listing, _ = rounds(release)
    job_id, record = next(
        (j, r) for j, r in listing.items()
        if r[AT["job_state"]] == "RUNNING" and last.get(j, ((),))[0] == r
    )  # fmt: skip
    assert job_from_listing(record, last[job_id], users(release)) == last[job_id][1]
    comment = with_value(record, "comment", "gavel:type=A3C")  # an update: same run
    names = users(release)
    got = job_from_listing(comment, last[job_id], names)
    assert got is not None and got.gpu_slices == last[job_id][1].gpu_slices
    for field, value in [("restart_cnt", "1"), ("start_time", "1795800000")]:
        assert job_from_listing(with_value(comment, field, value), last[job_id], names) is None
