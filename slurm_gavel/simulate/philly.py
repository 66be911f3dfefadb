"""The Microsoft Philly trace, as Sia's artifact publishes it, as a simulator trace.

Source: github.com/siasosp23/artifacts, file sia-simulator/traces/philly.csv (Jeon et
al., ATC'19; Sia, SOSP'23), header ``timestamp,duration,num_gpus,gpu_time,cluster``:
submission time (``YYYY-MM-DD HH:MM:SS``), run time in seconds, GPUs, GPU-seconds and
the virtual cluster. The data is not shipped; docs/user-guide.md says where to get it.

A window (start, hours) becomes the trace CSV of docs/design.md 2.3:

* arrival_time: seconds since the window's start; rows sorted by (arrival, file row);
  job ids 0, 1, ... in that order.
* job_type: the trace has none, so it is drawn by a documented, seeded rule: the
  SHA-256 of ``"<seed>:<timestamp>,<duration>,<num_gpus>,<cluster>#<n>"`` (n: how many
  identical rows came before in the file, so duplicates differ), its first 8 bytes as
  a big-endian integer, modulo the number of the table's job types that have figures
  at the row's GPU count, picks one of them in the table's order. The same file, seed
  and table give the same trace on any machine.
* total_steps: duration x the type's throughput on the reference GPU (v100), as Gavel
  turns a trace's durations into work: the job takes its recorded duration alone on
  that GPU.
* account: the virtual cluster (the hierarchical policies' entity).

Rows outside the window are dropped, as are jobs shorter than ``min_duration`` or
longer than ``max_duration`` (defaults 60 s and 7 days, as the stay-credit case
window of EXPERIMENTS.md "No cliff" was made) and jobs whose GPU count no job type of
the table has: each is counted in the skip report. A malformed row raises TraceError
naming the line.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.simulate.traces import TraceError, csv_records, trace_number

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# A run longer than this (about 3 years) is not a duration in seconds.
MAX_SECONDS = 1e8


@dataclass
class Skipped:
    """Rows left out, by reason, and rows kept that the report should mention."""

    reasons: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def lines(self) -> list[str]:
        out = [f"  {n:>6}  skipped: {why}" for why, n in sorted(self.reasons.items())]
        return out + [f"  {n:>6}  kept: {what}" for what, n in sorted(self.notes.items())]


def parse_start(text: str) -> datetime:
    """The window's start: ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM[:SS]`` (the trace's time)."""
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise TraceError(f"--start {text!r}: expected a date like 2017-10-17 or '2017-10-17 06:00'")


def pick_type(types: list[str], seed: int, key: str) -> str:
    """The seeded, documented job-type rule (module doc)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return types[int.from_bytes(digest[:8], "big") % len(types)]


@dataclass
class TraceJobs:
    """A trace row as a job (module doc; alibaba.py uses it too): its type by pick_type
    among the table's job types with figures at its GPU count, its steps its duration x
    that type's rate on the reference GPU; None where no type fits, the reason counted
    in ``skipped``."""

    table: ThroughputTable
    seed: int
    reference_gpu: str
    skipped: Skipped
    _types: dict[int, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reference_gpu not in self.table.gpu_types:
            raise TraceError(
                f"the throughput table has no '{self.reference_gpu}' column to turn durations "
                f"into steps; pass --reference-gpu, one of: {', '.join(self.table.gpu_types)}"
            )

    def job(
        self, gpus: int, seconds: float, key: str, arrival: float, account: str | None
    ) -> Job | None:
        table = self.table
        types = self._types.get(gpus)
        if types is None:
            types = self._types[gpus] = [jt for jt in table.job_types if table.has(jt, gpus)]
        if not types:
            self.skipped.reasons[f"{gpus} GPUs: no job type of the table has figures for it"] += 1
            return None
        job_type = pick_type(types, self.seed, key)
        rate = table.throughput(job_type, gpus, self.reference_gpu)
        if rate <= 0:
            self.skipped.reasons[f"{job_type} x{gpus} cannot run on {self.reference_gpu}"] += 1
            return None
        return Job(
            id="",
            job_type=job_type,
            scale_factor=gpus,
            total_steps=max(1.0, round(seconds * rate)),
            arrival_time=arrival,
            account=account,
        )


def philly_jobs(
    text: str,
    origin: str,
    table: ThroughputTable,
    start: datetime,
    hours: float,
    *,
    seed: int = 0,
    min_duration: float = 60.0,
    max_duration: float = 7 * 86400.0,
    reference_gpu: str = "v100",
) -> tuple[list[Job], Skipped]:
    """The window's jobs and what was skipped (module doc)."""
    if not (hours > 0 and math.isfinite(hours)):
        raise TraceError(f"--hours {hours}: must be a positive number of hours")
    skipped = Skipped()
    make = TraceJobs(table, seed, reference_gpu, skipped)
    col, records = csv_records(
        text,
        origin,
        PHILLY_COLUMNS,
        empty="Sia's philly.csv",
        header_fix="Sia's philly.csv (timestamp,duration,num_gpus,gpu_time,cluster)",
    )
    end = start + timedelta(hours=hours)
    seen: Counter[str] = Counter()
    rows: list[tuple[float, int, Job]] = []
    for line, where, row in records:
        ts, dur, gpus, cluster = (row[col[c]].strip() for c in PHILLY_COLUMNS)
        try:
            when = datetime.strptime(ts, TIME_FORMAT)
        except ValueError:
            raise TraceError(
                f"{where}: field 'timestamp': {ts!r} is not a time like 2017-10-17 06:00:00"
            ) from None
        seconds = trace_number(dur, where, "duration", fix="; give the run time in seconds")
        n = int(trace_number(gpus, where, "num_gpus", integer=True))
        if seconds < 0 or seconds > MAX_SECONDS:
            raise TraceError(
                f"{where}: field 'duration': {seconds:g} is not a run time in seconds "
                f"(0 to {MAX_SECONDS:g}); fix or delete the row"
            )
        if n < 1 or n > 1_000_000:
            raise TraceError(
                f"{where}: field 'num_gpus': {n} is not a GPU count (1 or more); fix or "
                "delete the row"
            )
        if not cluster:
            raise TraceError(
                f"{where}: field 'cluster' is empty; every job has its virtual cluster"
            )
        key = f"{ts},{dur},{gpus},{cluster}"
        nth = seen[key]
        seen[key] += 1
        if not (start <= when < end):
            continue  # outside the window: not counted
        if seconds < min_duration:
            skipped.reasons[f"shorter than {min_duration:g} s"] += 1
            continue
        if seconds > max_duration:
            skipped.reasons[f"longer than {max_duration:g} s"] += 1
            continue
        arrival = (when - start).total_seconds()
        job = make.job(n, seconds, f"{key}#{nth}", arrival, cluster)
        if job is not None:
            rows.append((arrival, line, job))
    rows.sort(key=lambda r: (r[0], r[1]))
    jobs = [replace(j, id=str(i)) for i, (_, _, j) in enumerate(rows)]
    return jobs, skipped
