"""An array task's progress reports reach the daemon: the daemon names the task
`ARRAY_TASK` ("28_2", backends/slurm/arrays.py) while its SLURM_JOB_ID is another number,
so the job library reports under the task's name (SLURM_ARRAY_JOB_ID and
SLURM_ARRAY_TASK_ID, set by every release). Hostile array variables fall back to
SLURM_JOB_ID: never another file name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.job.env import read_env
from slurm_gavel.job.progress import ProgressReporter

UID = os.geteuid()


@pytest.fixture
def spool() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="gavel-array-spool-", dir="/tmp"))
    root = base / "progress"
    root.mkdir(mode=0o755)
    mine = root / str(UID)
    mine.mkdir(mode=0o2750)
    os.chown(mine, UID, os.getegid())
    yield root
    shutil.rmtree(base)


def _task_env(spool: Path, **over: str) -> dict[str, str]:
    env = {"SLURM_JOB_ID": "31", "SLURM_ARRAY_JOB_ID": "28", "SLURM_ARRAY_TASK_ID": "2",
           "GAVEL_PROGRESS_DIR": str(spool), "GAVEL_JOB_TYPE": "A3C",
           "GAVEL_PROGRESS_INTERVAL": "0"}  # fmt: skip
    env.update(over)
    return env


def _report(env: dict[str, str], steps: int) -> ProgressReporter:
    rep = ProgressReporter.for_job(read_env(env), active=True)
    for _ in range(steps):
        rep.step_done()
    rep.write("running")
    return rep


def _seen_by_daemon(spool: Path, task: str) -> float | None:
    # steps/s of the order a few steps in a row make here (about 1,000): a report more
    # than 100x off its cell is refused whole, which a 10 steps/s cell did in most runs
    table = ThroughputTable(alone={("A3C", 1): {"v100": 1000.0}})
    job = Job(task, "A3C", arrival_time=0.0)
    o = ObservedJob(job, JobState.RUNNING, "v100", (NodeSlice("v100-0", 1),), user_id=UID)
    out = ProgressTracker(spool, table=table).merge(ClusterSnapshot(time.time(), (), (o,)))
    return out.jobs[0].steps_done


def test_an_array_task_reports_under_the_name_the_daemon_gives_it(spool: Path) -> None:
    _report(_task_env(spool), 7)
    assert [p.name for p in (spool / str(UID)).iterdir()] == ["28_2.json"]
    doc = json.loads((spool / str(UID) / "28_2.json").read_text())
    assert doc["job_id"] == "28_2"
    assert _seen_by_daemon(spool, "28_2") == 7


def test_a_plain_job_still_reports_under_its_job_id(spool: Path) -> None:
    env = _task_env(spool)
    del env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"]
    assert read_env(env).report_id == "31"
    _report(env, 3)
    assert _seen_by_daemon(spool, "31") == 3


@pytest.mark.hostile
@pytest.mark.parametrize(
    "array,task",
    [
        ("28", "../7"),
        ("28", "2\n"),
        ("28", "٣"),
        ("2 8", "2"),
        ("", "2"),
        ("28", ""),
        ("28", "-1"),
        ("28", "1" * 21),
        ("28/..", "2"),
    ],
)
def test_hostile_array_variables_fall_back_to_the_job_id(
    spool: Path, array: str, task: str
) -> None:
    env = read_env(_task_env(spool, SLURM_ARRAY_JOB_ID=array, SLURM_ARRAY_TASK_ID=task))
    assert env.report_id == "31" and env.array_task is None


def test_outside_slurm_the_array_variables_name_no_report() -> None:
    env = read_env({"SLURM_ARRAY_JOB_ID": "28", "SLURM_ARRAY_TASK_ID": "2"})
    assert env.report_id is None and not env.in_slurm
