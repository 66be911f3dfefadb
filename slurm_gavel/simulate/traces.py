"""Job traces: the CSV of docs/design.md §2.3 and Gavel's own tab-separated .trace files.

CSV header: job_id,arrival_time,job_type,scale_factor,total_steps,priority_weight,slo,account
(slo and account may be empty; priority_weight defaults to 1; scale_factor MIN-MAX makes
a moldable job, core/moldable/moldable.py). An optional last
column `restart_seconds` gives a job's own seconds per restart (checkpoint + restore;
`overhead`, its name before, is read too).

Gavel's .trace rows are tab-separated, in two generations:
  10 fields: job_type, command, working_dir, num_steps_arg, needs_data_dir,
             total_steps, scale_factor, priority_weight, SLO, arrival_time
   7 fields: job_type, command, num_steps_arg, needs_data_dir, total_steps,
             arrival_time, scale_factor
Job ids of .trace files are the 0-based row numbers (Gavel's own numbering).

Every problem raises :class:`TraceError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from slurm_gavel.core.moldable.moldable import ScaleRangeError, format_range, parse_range
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError

CSV_FIELDS = (
    "job_id",
    "arrival_time",
    "job_type",
    "scale_factor",
    "total_steps",
    "priority_weight",
    "slo",
    "account",
)
# Optional: seconds each restart of the job costs (its own checkpoint + restore; e.g.
# a job asking a long grace= for a big checkpoint). Written only when a job has it,
# so traces without it round-trip byte for byte. OLD_OVERHEAD_FIELD is its earlier
# name, still read (a trace may have one of the two, not both).
OVERHEAD_FIELD = "restart_seconds"
OLD_OVERHEAD_FIELD = "overhead"
REQUIRED = ("job_id", "arrival_time", "job_type", "scale_factor", "total_steps")


class TraceError(InputError):
    pass


def trace_number(
    text: str, where: str, field: str, *, integer: bool = False, noun: str = "field", fix: str = ""
) -> float:
    """A finite number (whole, if integer) read from a trace's text, or TraceError naming
    where, the field (or other noun: a true-row column) and the fix (appended)."""
    said = f"{where}: {noun} '{field}': {text!r}"
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{said} is not a number{fix}") from None
    if not math.isfinite(value):
        raise TraceError(f"{said} is not a finite number{fix}")
    if integer and value != int(value):
        raise TraceError(f"{said} is not a whole number{fix}")
    return value


def _check_job(
    job: Job,
    where: str,
    table: ThroughputTable | None,
    last_arrival: float,
    overhead_field: str = OVERHEAD_FIELD,
) -> None:
    if job.arrival_time < 0:
        raise TraceError(f"{where}: field 'arrival_time': {job.arrival_time:g} is negative")
    if job.arrival_time < last_arrival:
        raise TraceError(
            f"{where}: field 'arrival_time': {job.arrival_time:g} is earlier than the previous "
            f"row's {last_arrival:g}; sort the trace by arrival time"
        )
    if job.scale_factor < 1:
        raise TraceError(f"{where}: field 'scale_factor': {job.scale_factor} must be >= 1")
    if job.total_steps <= 0:
        raise TraceError(f"{where}: field 'total_steps': {job.total_steps:g} must be > 0")
    if job.priority_weight <= 0:
        raise TraceError(f"{where}: field 'priority_weight': {job.priority_weight:g} must be > 0")
    if job.slo is not None and job.slo <= 0:
        raise TraceError(f"{where}: field 'slo': {job.slo:g} must be > 0 seconds")
    if job.restart_overhead is not None and job.restart_overhead < 0:
        raise TraceError(
            f"{where}: field '{overhead_field}': {job.restart_overhead:g} must be >= 0 seconds"
        )
    if table is not None:
        if job.job_type not in table.job_types:
            raise TraceError(
                f"{where}: field 'job_type': unknown job type '{job.job_type}'; the throughput "
                f"table knows: {', '.join(table.job_types)}"
            )
        if not table.has(job.job_type, job.scale_factor):
            raise TraceError(
                f"{where}: field 'scale_factor': the table has no figures for "
                f"'{job.job_type}' on {job.scale_factor} GPUs; it has "
                f"{table.scale_factors(job.job_type)}"
            )


def _scale(text: str, where: str) -> tuple[int, tuple[int, int] | None]:
    """The scale_factor field: N GPUs, or MIN-MAX for a moldable job, which
    then has scale_factor MIN (what a scheduler that does not mold runs it at)."""
    try:
        r = parse_range(text)
    except ScaleRangeError as e:
        raise TraceError(f"{where}: field 'scale_factor': {e}") from None
    if r is not None:
        return r[0], r
    return int(trace_number(text, where, "scale_factor", integer=True)), None


def csv_records(
    text: str, origin: str, required: Iterable[str], *, empty: str, header_fix: str
) -> tuple[dict[str, int], Iterator[tuple[int, str, list[str]]]]:
    """A CSV file's header (column name -> index) and its non-blank rows as (line,
    ``origin:line``, fields), each checked to have as many fields as the header. The
    header is read at once: an empty file raises TraceError "expected {empty}", one
    whose header lacks a ``required`` column "expected {header_fix}"."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceError(f"{origin}: empty file; expected {empty}") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(f"{origin}:1: header lacks {', '.join(missing)}; expected {header_fix}")

    def rows() -> Iterator[tuple[int, str, list[str]]]:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            where = f"{origin}:{line}"
            if len(row) != len(header):
                raise TraceError(f"{where}: {len(row)} fields, the header has {len(header)}")
            yield line, where, row

    return {name: i for i, name in enumerate(header)}, rows()


def parse_csv(text: str, origin: str, table: ThroughputTable | None = None) -> list[Job]:
    col, rows = csv_records(
        text,
        origin,
        REQUIRED,
        empty=f"the header {','.join(CSV_FIELDS)}",
        header_fix=",".join(CSV_FIELDS),
    )
    overhead_field = OVERHEAD_FIELD
    if OLD_OVERHEAD_FIELD in col:
        if OVERHEAD_FIELD in col:
            raise TraceError(
                f"{origin}:1: header has both '{OVERHEAD_FIELD}' and '{OLD_OVERHEAD_FIELD}' "
                f"(its old name); keep only '{OVERHEAD_FIELD}'"
            )
        overhead_field = OLD_OVERHEAD_FIELD
    jobs: list[Job] = []
    seen: set[str] = set()
    last = 0.0
    for _line, where, row in rows:

        def get(name: str, row: list[str] = row) -> str:
            i = col.get(name)
            return row[i].strip() if i is not None else ""

        job_id = get("job_id")
        if not job_id:
            raise TraceError(f"{where}: field 'job_id' is empty")
        if job_id in seen:
            raise TraceError(f"{where}: field 'job_id': '{job_id}' appears twice")
        seen.add(job_id)
        weight = get("priority_weight")
        slo = get("slo")
        overhead = get(overhead_field)
        sf, scale_range = _scale(get("scale_factor"), where)
        job = Job(
            id=job_id,
            job_type=get("job_type"),
            scale_factor=sf,
            scale_range=scale_range,
            priority_weight=trace_number(weight, where, "priority_weight") if weight else 1.0,
            total_steps=trace_number(get("total_steps"), where, "total_steps"),
            arrival_time=trace_number(get("arrival_time"), where, "arrival_time"),
            account=get("account") or None,
            slo=trace_number(slo, where, "slo") if slo else None,
            restart_overhead=trace_number(overhead, where, overhead_field) if overhead else None,
        )
        _check_job(job, where, table, last, overhead_field)
        last = job.arrival_time
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{origin}: no jobs after the header")
    return jobs


def parse_gavel_trace(text: str, origin: str, table: ThroughputTable | None = None) -> list[Job]:
    jobs: list[Job] = []
    last = 0.0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{origin}:{line_no}"
        f = line.split("\t")
        if len(f) == 10:
            jt, steps, sf, weight, slo, arrival = f[0], f[5], f[6], f[7], f[8], f[9]
        elif len(f) == 7:
            jt, steps, arrival, sf, weight, slo = f[0], f[4], f[5], f[6], "1", "-1"
        else:
            raise TraceError(
                f"{where}: {len(f)} tab-separated fields; a Gavel .trace row has 10 (or 7 in "
                "older traces)"
            )
        slo_v = trace_number(slo, where, "SLO")
        job = Job(
            id=str(len(jobs)),
            job_type=jt.strip(),
            scale_factor=int(trace_number(sf, where, "scale_factor", integer=True)),
            priority_weight=trace_number(weight, where, "priority_weight"),
            total_steps=trace_number(steps, where, "total_steps"),
            arrival_time=trace_number(arrival, where, "arrival_time"),
            slo=slo_v if slo_v > 0 else None,  # Gavel writes -1 for "no SLO"
        )
        _check_job(job, where, table, last)
        last = job.arrival_time
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{origin}: no jobs in the trace")
    return jobs


def load_trace(path: str | Path, table: ThroughputTable | None = None) -> list[Job]:
    """Read a trace (CSV, or Gavel's .trace when the name ends in .trace)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise TraceError(f"{p}: cannot read the trace ({e.strerror})") from e
    except UnicodeDecodeError:
        raise TraceError(f"{p}: not a text file; expected a CSV trace") from None
    if p.suffix == ".trace":
        return parse_gavel_trace(text, str(p), table)
    return parse_csv(text, str(p), table)


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def trace_csv(jobs: Iterable[Job]) -> str:
    jobs = list(jobs)
    with_overhead = any(j.restart_overhead is not None for j in jobs)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_FIELDS + ((OVERHEAD_FIELD,) if with_overhead else ()))
    for j in jobs:
        extra = (
            []
            if not with_overhead
            else ["" if j.restart_overhead is None else _fmt(j.restart_overhead)]
        )
        w.writerow(
            [
                j.id,
                _fmt(j.arrival_time),
                j.job_type,
                j.scale_factor if j.scale_range is None else format_range(j.scale_range),
                _fmt(j.total_steps),
                _fmt(j.priority_weight),
                "" if j.slo is None else _fmt(j.slo),
                j.account or "",
                *extra,
            ]
        )
    return out.getvalue()


def save_trace(jobs: Iterable[Job], path: str | Path) -> None:
    Path(path).write_text(trace_csv(jobs))
