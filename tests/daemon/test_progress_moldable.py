"""A moldable job's progress report votes on the table cell of the GPU count
it runs at, not of its scale factor (the range's minimum): a rate measured on 2 GPUs
must never move the 1-GPU cell."""

from __future__ import annotations

import json
import os
from pathlib import Path

from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.job.progress import FORMAT

NOW = 1_000_000.0
A3C = "A3C"
ALICE = 1001


def _report(spool: Path, job_id: str, rate: float) -> None:
    folder = spool / str(ALICE)
    if not folder.exists():
        folder.mkdir(mode=0o2750)
        os.chown(folder, ALICE, os.getegid())
    doc = {"format": FORMAT, "job_id": job_id, "job_type": A3C, "steps": 10,
           "steps_per_s": rate, "run_steps": 10, "restart_count": 0, "state": "running",
           "hostname": "n", "gpu": "x", "updated": NOW - 5}  # fmt: skip
    path = folder / f"{job_id}.json"
    path.write_text(json.dumps(doc))
    os.chown(path, ALICE, ALICE)


def _on_two_gpus(job_id: str) -> ObservedJob:
    job = Job(job_id, A3C, 1, arrival_time=NOW - 3600, scale_range=(1, 4))
    return ObservedJob(job, JobState.RUNNING, "v100", (NodeSlice("v100-0", 2),), user_id=ALICE)


def _merge(t: ProgressTracker, o: ObservedJob) -> ObservedJob:
    return t.merge(ClusterSnapshot(NOW, (), (o,))).jobs[0]


def test_the_rate_votes_on_the_cell_of_the_count_it_runs_at(spool):
    table = ThroughputTable(alone={(A3C, 1): {"v100": 10.0}, (A3C, 2): {"v100": 18.0}})
    t = ProgressTracker(spool, table=table)
    _merge(t, _on_two_gpus("7"))
    _report(spool, "7", 17.0)
    got = _merge(t, _on_two_gpus("7"))
    assert got.measured_throughput == 17.0
    assert set(t.cells) == {f"{A3C}|2|v100"}  # not A3C|1|v100


def test_a_count_the_table_lacks_moves_no_cell(spool):
    table = ThroughputTable(alone={(A3C, 1): {"v100": 10.0}})
    t = ProgressTracker(spool, table=table)
    _merge(t, _on_two_gpus("8"))
    _report(spool, "8", 17.0)
    _merge(t, _on_two_gpus("8"))
    assert not t.cells
