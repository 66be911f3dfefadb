"""Jobs' true throughput rows in a trace: the optional CSV columns ``throughput_<gpu type>``.

A trace row may say how fast that job really is on each GPU type (steps/s at the job's
scale factor, e.g. ``throughput_v100``): the simulator runs it at that rate, and the
scheduler sees it only under ``--knowledge oracle`` (else it learns it as the job runs:
core/learned_rows/job_rows.py). An empty cell, or no such column, means "as its job type's row in
the throughput table". A trace without any such column replays exactly as before.

The columns are user input: NaN, inf, negative, huge or non-numeric values are refused
with the file, line, column and the fix (TraceError).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from slurm_gavel.domain.model import GpuType, Job, JobId
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.simulate.traces import TraceError, trace_csv, trace_number

PREFIX = "throughput_"
# No model trains at a million steps/s per job; a bigger figure is a unit mistake (a
# samples/s or a steps-per-hour column), and would finish a job within one round.
MAX_STEPS_PER_S = 1e6
FIX = (
    "give the job's steps/s on that GPU type at its scale factor (a number >= 0, "
    f"at most {MAX_STEPS_PER_S:g}), or leave the cell empty for its job type's table figure"
)

Rows = dict[JobId, dict[GpuType, float]]


def _cell(text: str, where: str, column: str) -> float:
    value = trace_number(text, where, column, noun="column", fix=f"; {FIX}")
    if value < 0:
        raise TraceError(f"{where}: column '{column}': {text!r} is negative; {FIX}")
    if value > MAX_STEPS_PER_S:
        raise TraceError(f"{where}: column '{column}': {text!r} is implausibly large; {FIX}")
    return value


def parse_true_rows(text: str, origin: str) -> Rows:
    """{job id: {gpu type: steps/s}} from a CSV trace's ``throughput_*`` columns (jobs
    with every such cell empty are left out; {} without the columns). The rest of
    the row is parse_csv's business (traces.py): call it first."""
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    cols = [(i, h, h[len(PREFIX) :]) for i, h in enumerate(header) if h.startswith(PREFIX)]
    if not cols:
        return {}
    for _, h, t in cols:
        if not t:
            raise TraceError(
                f"{origin}:1: column '{h}' names no GPU type; name it {PREFIX}<gpu type>, "
                "e.g. throughput_v100"
            )
    id_col = header.index("job_id") if "job_id" in header else 0
    rows: Rows = {}
    for row in reader:
        if not row or all(not c.strip() for c in row) or len(row) != len(header):
            continue  # blank, or refused by parse_csv with its own message
        where = f"{origin}:{reader.line_num}"
        cells = {t: _cell(row[i].strip(), where, h) for i, h, t in cols if row[i].strip()}
        if cells and not any(v > 0 for v in cells.values()):
            raise TraceError(
                f"{where}: every throughput_* cell is 0, so the job could run nowhere; {FIX}"
            )
        if cells:
            rows[row[id_col].strip()] = cells
    return rows


def load_true_rows(path: str | Path) -> Rows:
    """The true rows of a trace file ({} for Gavel's .trace files: they have none)."""
    p = Path(path)
    if p.suffix == ".trace":
        return {}
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: cannot read the trace ({e})") from e
    return parse_true_rows(text, str(p))


def complete_rows(
    jobs: Iterable[Job], rows: Mapping[JobId, Mapping[GpuType, float]],
    table: ThroughputTable, gpu_types: Iterable[GpuType],
) -> Rows:  # fmt: skip
    """Each job with a true row, on every one of ``gpu_types``: its own figure, else its
    type's table figure (0, cannot run there, where the table has none either). The
    same dict per job is what the simulator runs and what the oracle is shown."""
    types = list(dict.fromkeys(gpu_types))
    out: Rows = {}
    for job in jobs:
        own = rows.get(job.id)
        if own is None:
            continue
        base = table.alone.get((job.job_type, job.scale_factor), {})
        out[job.id] = {t: float(own[t]) if t in own else base.get(t, 0.0) for t in types}
    return out


def draw_true_rows(
    jobs: Iterable[Job],
    table: ThroughputTable,
    gpu_types: Iterable[GpuType],
    spread: float,
    seed: int = 0,
) -> Rows:
    """True rows drawn around the jobs' type rows: each cell times exp(N(0, spread)),
    independently (so no two jobs alike, and the ratios between types differ per job
    as they do between models: the measured H200 figures range 1.5x-13x over a V100).
    Figures are rounded to 6 significant digits so a saved trace reads back exactly."""
    if not (0 <= spread < 5):
        raise TraceError(f"--row-spread {spread}: give a log-normal sigma in [0, 5)")
    rng = np.random.default_rng([seed, 27])  # apart from the trace's own draws
    types = list(dict.fromkeys(gpu_types))
    out: Rows = {}
    for job in jobs:
        base = table.row(job.job_type, job.scale_factor)
        noise = rng.normal(0.0, spread, size=len(types))
        out[job.id] = {
            t: float(f"{base.get(t, 0.0) * math.exp(z):.6g}")
            for t, z in zip(types, noise, strict=True)
        }
    return out


def trace_with_rows_csv(jobs: Iterable[Job], rows: Mapping[JobId, Mapping[GpuType, float]]) -> str:
    """trace_csv() with a throughput_<type> column per GPU type any row names (empty
    for jobs without a figure); exactly trace_csv() when ``rows`` is empty."""
    jobs = list(jobs)
    base = trace_csv(jobs)
    types = list(dict.fromkeys(t for r in rows.values() for t in r))
    if not types:
        return base
    lines = base.splitlines()
    out = [lines[0] + "," + ",".join(PREFIX + t for t in types)]
    for job, line in zip(jobs, lines[1:], strict=True):
        own = rows.get(job.id, {})
        out.append(line + "," + ",".join(repr(own[t]) if t in own else "" for t in types))
    return "\n".join(out) + "\n"
