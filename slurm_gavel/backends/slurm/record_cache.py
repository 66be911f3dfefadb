"""Parse each squeue record once while it does not change (SlurmBackend.observe).

With thousands of managed jobs waiting, most squeue records are the same from one
round to the next, and turning 5,000 of them into SlurmJob is a fifth of observe's
Python time. JobRecordCache keeps, per job id, the raw values of the fields
from_json._job reads (FIELDS) with the SlurmJob made from them, and reuses that
SlurmJob when every one of those values is equal in the new record (a plain ==
on the values: no hashing of user text, nothing trusted from the record but what
_job itself reads). A record with any changed field is parsed afresh, so the jobs
are exactly those parse_jobs returns (tests/backends/slurm/test_record_cache.py checks
that FIELDS covers every field _job reads). Only the last observe's records are
kept: memory is bounded by the jobs listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_gavel.backends.slurm.from_json import _errors, _get, _job, parse_version
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.backends.slurm.releases import SlurmVersion

# Every field of a job record from_json._job reads (and nothing else decides its
# SlurmJob). Adding a field there without adding it here fails the cache's test.
FIELDS = (
    "job_id",
    "array_job_id",
    "array_task_id",
    "array_task_string",
    "job_state",
    "nodes",
    "tres_per_node",
    "tres_per_job",
    "gres_detail",
    "partition",
    "user_id",
    "state_reason",
    "comment",
    "node_count",
    "priority",
    "restart_cnt",
    "submit_time",
    "start_time",
    "end_time",
    "exit_code",
    "account",
    "user_name",
    "qos",
    "eligible_time",
    "dependency",
    "tasks",
    "tasks_per_node",
    "deadline",
    "array_max_tasks",
    "name",
    # job_needs
    "features",
    "excluded_nodes",
    "memory_per_node",
    "memory_per_cpu",
    "memory_per_tres",
    "minimum_cpus_per_node",
    "cpus_per_tres",
    "prefer",
    # reservations.py
    "resv_name",
    "time_limit",
)


class JobRecordCache:
    """parse_jobs with the SlurmJob of unchanged records reused from the last call."""

    def __init__(self) -> None:
        self._version: SlurmVersion | None = None
        self._last: dict[Any, tuple[tuple[Any, ...], SlurmJob]] = {}
        self.reused = 0  # records reused by the last parse (for benchmarks)

    def parse(
        self, doc: Mapping[str, Any], *, allow_newer: bool = False
    ) -> tuple[SlurmVersion, list[SlurmJob]]:
        version = parse_version(doc, allow_newer=allow_newer)
        _errors(doc, "squeue")
        if version != self._version:  # another release or parser: start afresh
            self._last = {}
            self._version = version
        last = self._last
        fresh: dict[Any, tuple[tuple[Any, ...], SlurmJob]] = {}
        jobs: list[SlurmJob] = []
        reused = 0
        for raw in _get(doc, "jobs", "squeue", version):
            if not isinstance(raw, Mapping):
                jobs.append(_job(raw, version))  # _job names the problem
                continue
            values = tuple(raw.get(f) for f in FIELDS)
            key = values[0] if isinstance(values[0], (int, str)) else None
            hit = last.get(key) if key is not None else None
            if hit is not None and hit[0] == values:
                job = hit[1]
                reused += 1
            else:
                job = _job(raw, version)
            if key is not None:
                fresh[key] = (values, job)
            jobs.append(job)
        self._last = fresh
        self.reused = reused
        return version, jobs
