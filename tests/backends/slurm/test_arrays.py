"""Job arrays, each task a job of its own (backends/slurm/arrays.py): pure parts here,
on the real cluster in test_arrays_on_slurm.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.admin_comment import comment_orders
from slurm_gavel.backends.slurm.arrays import (
    array_of,
    expand_tasks,
    pending_tasks,
    task_job_id,
    throttled,
)
from slurm_gavel.backends.slurm.cli.commands import errors_by_job
from slurm_gavel.backends.slurm.from_json import parse_jobs
from slurm_gavel.backends.slurm.records import SlurmJob

DATA = Path(__file__).parents[1] / "data" / "22.05"
UNSET = {"set": False, "infinite": False, "number": 0}


def num(n: int) -> dict:
    return {"set": True, "infinite": False, "number": n}


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        ({"array_job_id": 0, "array_task_id": None}, "7"),  # 22.05: not an array
        ({"array_job_id": num(0), "array_task_id": UNSET}, "7"),  # 26.05: not an array
        ({"array_job_id": 28, "array_task_id": None, "array_task_string": "0-3"}, "7"),
        ({"array_job_id": 28, "array_task_id": 1}, "28_1"),  # a split-off task, 22.05
        ({"array_job_id": num(10), "array_task_id": num(0)}, "10_0"),  # 26.05
    ],
)
def test_a_task_is_named_array_task_whatever_record_holds_it(raw, expect):
    assert task_job_id(raw, "7") == expect


@pytest.mark.parametrize(
    ("text", "tasks"),
    [
        ("0-3", [0, 1, 2, 3]),
        ("0,2-3", [0, 2, 3]),
        ("1-9:4", [1, 5, 9]),
        ("0-5%2", [0, 1, 2, 3, 4, 5]),  # the throttle says nothing of which tasks
        ("7", [7]),
    ],
)
def test_a_meta_records_pending_tasks(text, tasks):
    raw = {"array_job_id": 28, "array_task_id": None, "array_task_string": text}
    assert pending_tasks(raw) == tuple(f"28_{t}" for t in tasks)
    assert pending_tasks({**raw, "array_task_id": 3}) == ()  # a task's own record
    assert pending_tasks({**raw, "array_job_id": num(28), "array_task_id": UNSET}) != ()


@pytest.mark.hostile
@pytest.mark.parametrize(
    "text", ["3-1", "1-9:0", "a-b", "1;scancel", "0-99999999", "1,,2", "-1", "1-2-3", "0-4000001"]
)
def test_an_unreadable_task_string_expands_to_nothing(text):
    raw = {"array_job_id": 28, "array_task_id": None, "array_task_string": text}
    assert pending_tasks(raw) == ()


def test_a_meta_record_becomes_one_held_job_per_task_and_a_task_record_is_renamed():
    _, jobs = parse_jobs(json.loads((DATA / "squeue.json").read_text()))
    job = next(j for j in jobs if j.comment.startswith("gavel:") and j.state == "PENDING")
    meta = replace(job, job_id="28", array_tasks=("28_0", "28_1", "28_2"))
    # task 1 has its own record (job 29) in the same read: that one, not the meta's
    split = replace(job, job_id="29", task_id="28_1", state="RUNNING")
    out = expand_tasks([meta, job, split])
    assert [j.job_id for j in out] == ["28_0", "28_2", job.job_id, "28_1"]
    assert all(j.held and j.comment == job.comment and j.array_tasks == () for j in out[:2])
    assert out[3].state == "RUNNING"


def test_a_tasks_error_is_its_own_not_the_arrays_or_another_jobs():
    per_job, other = errors_by_job(
        "scontrol: error: Job resizing not supported for job arrays for job 28_2\n"
        "scancel: error: Kill job error on job id 28_10: Job can not be altered now\n"
        "Invalid job id specified for job 28\n"
    )
    assert per_job == {
        "28_2": "scontrol: error: Job resizing not supported for job arrays for job 28_2",
        "28_10": "scancel: error: Kill job error on job id 28_10: Job can not be altered now",
        "28": "Invalid job id specified for job 28",
    }
    assert other == []


def test_an_array_task_gets_its_admin_comment():
    (order,) = comment_orders({"28_2": "waiting", "_2": "x", "2_": "x", "2_3_4": "x"})
    assert order.job_ids == ("28_2",)


def throttle_case(limit: int, states: dict[str, str]) -> dict[str, SlurmJob]:
    """Tasks of array 28 (throttle `limit`) in these states; a "released" one is pending
    and no longer held (the daemon placed it; Slurm may start it any moment)."""
    _, jobs = parse_jobs(json.loads((DATA / "squeue.json").read_text()))
    base = next(j for j in jobs if j.comment.startswith("gavel:") and j.state == "PENDING")
    out = {}
    for job_id, state in states.items():
        if state == "released":
            out[job_id] = replace(base, job_id=job_id, array_max_tasks=limit, priority=1,
                                  reason="Priority")  # fmt: skip
        else:
            out[job_id] = replace(base, job_id=job_id, state=state, array_max_tasks=limit)
    return out


def test_a_throttled_array_gets_no_more_tasks_considered_than_its_limit_leaves():
    managed = throttle_case(2, {"28_0": "RUNNING", "28_1": "PENDING", "28_2": "PENDING",
                                "28_10": "PENDING", "7": "PENDING"})  # fmt: skip
    waiting = ["28_1", "28_2", "28_10", "7"]
    out = throttled(managed, waiting)
    assert sorted(out) == ["28_10", "28_2"]  # one slot left: the lowest task takes it
    assert "throttle (%2): 1 of its tasks run" in out["28_2"]
    # both slots taken (one ending counts): none
    managed["28_1"] = replace(managed["28_1"], state="COMPLETING")
    assert sorted(throttled(managed, ["28_2", "28_10"])) == ["28_10", "28_2"]
    # a task already released (Slurm may start it) keeps its slot before a held one
    managed = throttle_case(1, {"28_1": "PENDING", "28_5": "released"})
    assert list(throttled(managed, ["28_1", "28_5"])) == ["28_1"]
    # no throttle, or not an array task: nothing left out
    managed = throttle_case(0, {"28_0": "RUNNING", "28_1": "PENDING"})
    assert throttled(managed, ["28_1"]) == {}


@pytest.mark.parametrize(
    ("raw", "limit"),
    [
        ({"array_max_tasks": 2}, 2),  # 22.05
        ({"array_max_tasks": num(2)}, 2),  # 23.02+
        ({"array_max_tasks": num(0)}, 0),
        ({"array_max_tasks": UNSET}, 0),
        ({"array_max_tasks": {"set": True, "infinite": True, "number": 0}}, 0),
        ({}, 0),
    ],
)
def test_the_throttle_is_read_from_every_releases_json(raw, limit):
    doc = json.loads((DATA / "squeue.json").read_text())
    job = next(j for j in doc["jobs"] if str(j.get("comment", "")).startswith("gavel:"))
    job = {k: v for k, v in job.items() if k != "array_max_tasks"} | raw
    _, jobs = parse_jobs({**doc, "jobs": [job]})
    assert jobs[0].array_max_tasks == limit


def test_array_of_names_only_task_ids():
    assert array_of("28_3") == "28" and array_of("28") is None
    assert array_of("_3") is None and array_of("28_") is None and array_of("a_1") is None
