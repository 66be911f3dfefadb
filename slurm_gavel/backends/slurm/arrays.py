"""Job arrays, each task a job of its own.

Slurm keeps an array's pending tasks in one record (the meta record: job_id = the
array's id, array_task_string "0,2-5%2") and gives a task its own record when it
starts, or when it alone is updated, held or released (`scontrol update
JobId=28_2 ...` splits task 2 off; measured on 22.05 and 26.05). Naming the array's
id in a command acts on every pending task: one placement and one release freed all
six tasks of an array, the next placement failed ("Job resizing not supported for job
arrays"). So the daemon never names the array: every task is a job with the id
`ARRAY_TASK` ("28_2"), which every Slurm command accepts, for the whole task's life,
whether it still sits in the meta record or has its own (whose job_id is another
number: the readers key records by it; SlurmJob.task_id holds the task's name). After
each read, a task's record is renamed and a meta record's pending tasks become one
SlurmJob each (expand_tasks); the tasks left in it stay held until the daemon places
each alone.

Pure functions over the JSON every release prints: array_job_id (0 or unset: not an
array), array_task_id (unset on a meta record), array_task_string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from slurm_gavel.backends.slurm.fields import number
from slurm_gavel.backends.slurm.records import RUNNING_STATES, SlurmJob

# More tasks than any Slurm allows (MaxArraySize is at most 4,000,001): a string that
# claims more is not read (its tasks stay in the meta record, held).
MAX_TASKS = 4_000_001
_RANGE = re.compile(r"^([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?$", re.ASCII)


def _set(value: Any) -> bool:
    """A 23.02+ {"set": false} number, or None: unset."""
    if value is None:
        return False
    return not (isinstance(value, Mapping) and not value.get("set", True))


def task_job_id(raw: Mapping[str, Any], job_id: str) -> str:
    """An array task's id as `ARRAY_TASK`; any other record keeps its job_id."""
    array = number(raw.get("array_job_id"))
    task = raw.get("array_task_id")
    if array <= 0 or not _set(task):
        return job_id
    return f"{array}_{number(task)}"


def pending_tasks(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """The ids of the tasks a meta record holds (its array_task_string: "0-5",
    "0,2-3", "1-9:2", with a throttle "%2" that says nothing of which tasks); () for
    any other record, or a string that cannot be read."""
    text = str(raw.get("array_task_string") or "").split("%", 1)[0]
    array = number(raw.get("array_job_id"))
    if not text or array <= 0 or _set(raw.get("array_task_id")):
        return ()
    tasks: list[int] = []
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            return ()
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1 or len(tasks) + (last - first) // step + 1 > MAX_TASKS:
            return ()
        tasks.extend(range(first, last + 1, step))
    return tuple(f"{array}_{t}" for t in tasks)


def expand_tasks(jobs: Iterable[SlurmJob]) -> list[SlurmJob]:
    """The jobs as the daemon names them: a task's own record as ARRAY_TASK, a meta
    record as one job per task it holds (same state, reason, comment), every other
    job as it is. A task with its own record in the same read is that record, never
    also the meta record's: the CLI's listing does not print a meta record's task list,
    so a meta record may be a round old (cli/listing.py reads its JSON each round)."""
    jobs = list(jobs)
    own = {j.task_id for j in jobs if j.task_id}
    out: list[SlurmJob] = []
    for job in jobs:
        if job.task_id:
            out.append(replace(job, job_id=job.task_id))
        elif job.array_tasks:
            out.extend(
                replace(job, job_id=t, array_tasks=()) for t in job.array_tasks if t not in own
            )
        else:
            out.append(job)
    return out


def array_of(job_id: str) -> str | None:
    """The array a task id ("28_3") belongs to ("28"); None for any other job."""
    array, sep, task = job_id.partition("_")
    return array if sep and array.isdigit() and task.isdigit() else None


def throttled(managed: Mapping[str, SlurmJob], waiting: Iterable[str]) -> dict[str, str]:
    """The waiting tasks of throttled arrays (--array=0-5%2) the round must leave out,
    -> why: Slurm runs at most array_max_tasks of an array's tasks at once and leaves
    any other released task pending (JobArrayTaskLimit), where the GPUs the daemon gave
    it sit idle while it is placed, held and placed again round after round. Of the
    waiting tasks, as many as the throttle leaves room for beside the tasks running
    (or ending) are kept, those Slurm may already start (released) first, then by task
    number; the rest wait for a running task to end."""
    limit: dict[str, int] = {}
    running: dict[str, int] = {}
    for job_id, sj in managed.items():
        array = array_of(job_id)
        if array is None or sj.array_max_tasks <= 0:
            continue
        limit[array] = sj.array_max_tasks
        if sj.state in RUNNING_STATES:
            running[array] = running.get(array, 0) + 1
    by_array: dict[str, list[tuple[bool, int, str]]] = {}
    for job_id in waiting:
        array = array_of(job_id)
        if array is None or array not in limit:
            continue
        held = managed[job_id].held
        by_array.setdefault(array, []).append((held, int(job_id.partition("_")[2]), job_id))
    out: dict[str, str] = {}
    for array, tasks in by_array.items():
        room = max(0, limit[array] - running.get(array, 0))
        for _, _, job_id in sorted(tasks)[room:]:
            out[job_id] = (
                f"its array's throttle (%{limit[array]}): {running.get(array, 0)} of its "
                "tasks run, and Slurm starts no more until one ends"
            )
    return out
