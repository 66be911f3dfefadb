"""Alibaba's GPU cluster trace v2023 as a simulator trace and cluster spec.

Source: github.com/alibaba/clusterdata, folder cluster-trace-gpu-v2023 (Weng et al.,
ATC'23), not shipped (docs/user-guide.md says where to get it):

* ``csv/openb_node_list_gpu_node.csv``: ``sn,cpu_milli,memory_mib,gpu,model``, one
  row per node of a 1,213-node, 7-model production cluster (A10, G2, G3, P100, T4,
  V100M16, V100M32; G1-G3 are undisclosed internal models).
* ``csv/openb_pod_list_*.csv``: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,
  qos,pod_phase,creation_time,deletion_time,scheduled_time`` (seconds), one row per
  task. ``gpu_milli`` < 1000 with one GPU is a task asking for a fraction of a GPU.

Pods become jobs (window: creation in [start, start + hours)):

* GPU pods only (``num_gpu`` >= 1); pods never scheduled (empty ``scheduled_time``)
  are skipped; a pod still running when the trace ends keeps the run it was seen for
  (``deletion_time`` is then the trace's end: a lower bound, counted in the report).
* duration = deletion_time - scheduled_time; arrival = creation_time - start.
* job_type: philly.pick_type's seeded rule with the pod's name as the key;
  total_steps = duration x the type's reference-GPU (v100) rate; account = the QoS
  class (LS, BE, Burstable, Guaranteed).
* A fraction-of-a-GPU pod is a candidate for a shard (several sharing one GPU); the
  trace has no column for that, so it becomes a whole 1-GPU job (``fractional=whole``,
  counted in the report) or is left out (``fractional=skip``).
* ``gpu_spec`` (a pod's required models) is not kept: the policies pick the type.

The node list becomes a ``--cluster`` spec: each model is mapped to a GPU type of the
throughput table (``--gpu-map``; DEFAULT_GPU_MAP says why each default), each type's
GPUs are scaled by ``scale`` and split into nodes of that type's most common node size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.simulate.philly import MAX_SECONDS, Skipped, TraceJobs
from slurm_gavel.simulate.traces import TraceError, csv_records, trace_number

POD_COLUMNS = ("name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time",
               "scheduled_time")  # fmt: skip
NODE_COLUMNS = ("sn", "gpu", "model")

# Each model to a column of the shipped table (v100, p100, k80), by FP32 rate: V100s
# are v100; A10 (31 TFLOPS) is at least a V100 (15.7); P100 is p100, and T4 (8.1) is
# closest to it (9.3); G1-G3 are undisclosed: k80, the slowest column, by default
# (say otherwise with --gpu-map G2=v100 when you know better).
DEFAULT_GPU_MAP = {
    "V100M16": "v100",
    "V100M32": "v100",
    "A10": "v100",
    "P100": "p100",
    "T4": "p100",
    "G1": "k80",
    "G2": "k80",
    "G3": "k80",
}


def _rows(
    text: str, origin: str, columns: tuple[str, ...], what: str
) -> Iterator[tuple[str, dict[str, str]]]:
    col, records = csv_records(
        text,
        origin,
        columns,
        empty=f"Alibaba's {what}",
        header_fix=f"Alibaba's {what} ({','.join(columns)}, ...)",
    )
    for _line, where, row in records:
        yield where, {c: row[col[c]].strip() for c in columns}


def _seconds(text: str, where: str, field: str) -> float:
    v = trace_number(text, where, field, fix="; give seconds since the trace's start")
    if v < 0 or v > MAX_SECONDS:
        raise TraceError(
            f"{where}: field '{field}': {v:g} is not a time in seconds (0 to {MAX_SECONDS:g}); "
            "fix or delete the row"
        )
    return v


def alibaba_jobs(
    text: str,
    origin: str,
    table: ThroughputTable,
    start: float,
    hours: float,
    *,
    seed: int = 0,
    fractional: str = "whole",
    min_duration: float = 1.0,
    reference_gpu: str = "v100",
) -> tuple[list[Job], Skipped]:
    """The window's GPU pods as jobs, and what was skipped (module doc)."""
    if fractional not in ("whole", "skip"):
        raise TraceError(f"--fractional {fractional!r}: expected whole or skip")
    if not (0 < hours < 1e6) or not (0 <= start < MAX_SECONDS):
        raise TraceError(f"window {start:g} s + {hours:g} h: give start >= 0 s and hours > 0")
    skipped = Skipped()
    make = TraceJobs(table, seed, reference_gpu, skipped)
    end = start + hours * 3600.0
    rows: list[tuple[float, str, Job]] = []
    names: set[str] = set()
    for where, r in _rows(text, origin, POD_COLUMNS, "pod list (openb_pod_list_*.csv)"):
        name = r["name"]
        if not name:
            raise TraceError(f"{where}: field 'name' is empty; every pod has its name")
        if name in names:
            raise TraceError(f"{where}: field 'name': '{name}' appears twice")
        names.add(name)
        gpus = int(trace_number(r["num_gpu"], where, "num_gpu", integer=True))
        if gpus < 0 or gpus > 1024:
            raise TraceError(f"{where}: field 'num_gpu': {gpus} is not a GPU count (0 to 1024)")
        created = _seconds(r["creation_time"], where, "creation_time")
        if gpus == 0 or not (start <= created < end):
            continue  # CPU-only pods and pods outside the window are not jobs here
        if not r["scheduled_time"]:
            skipped.reasons["never scheduled (pending when the trace ends)"] += 1
            continue
        began = _seconds(r["scheduled_time"], where, "scheduled_time")
        ended = _seconds(r["deletion_time"], where, "deletion_time")
        if ended < began:
            raise TraceError(
                f"{where}: field 'deletion_time': {ended:g} is before scheduled_time {began:g}; "
                "fix or delete the row"
            )
        milli = trace_number(r["gpu_milli"] or "1000", where, "gpu_milli")
        if not (0 <= milli <= 1000):
            raise TraceError(f"{where}: field 'gpu_milli': {milli:g} is not 0 to 1000")
        if gpus == 1 and milli < 1000:
            if fractional == "skip":
                skipped.reasons["a fraction of a GPU (--fractional skip)"] += 1
                continue
            skipped.notes["fraction of a GPU, run as 1 GPU (shard candidate)"] += 1
        seconds = ended - began
        if seconds < min_duration:
            skipped.reasons[f"ran shorter than {min_duration:g} s"] += 1
            continue
        job = make.job(gpus, seconds, name, created - start, r["qos"] or None)
        if job is not None:
            rows.append((created, name, job))
    rows.sort(key=lambda x: (x[0], x[1]))
    return [replace(j, id=str(i)) for i, (_, _, j) in enumerate(rows)], skipped


def parse_gpu_map(items: list[str]) -> dict[str, str]:
    """--gpu-map MODEL=TYPE (repeatable) over DEFAULT_GPU_MAP."""
    out = dict(DEFAULT_GPU_MAP)
    for item in items:
        model, sep, gpu = item.partition("=")
        if not sep or not model.strip() or not gpu.strip():
            raise TraceError(f"--gpu-map '{item}': expected MODEL=TYPE, e.g. G2=v100")
        out[model.strip()] = gpu.strip()
    return out


def alibaba_cluster(
    text: str, origin: str, table: ThroughputTable, gpu_map: dict[str, str], scale: float
) -> str:
    """The node list as a --cluster spec (module doc)."""
    if not (0 < scale <= 1):
        raise TraceError(f"--scale {scale}: must be 0 < scale <= 1 (0.01 = a hundredth)")
    known = set(table.gpu_types)
    gpus_of: Counter[str] = Counter()
    sizes: dict[str, Counter[int]] = {}
    for where, r in _rows(text, origin, NODE_COLUMNS, "node list (openb_node_list_*.csv)"):
        n = int(trace_number(r["gpu"], where, "gpu", integer=True))
        if n < 0 or n > 1024:
            raise TraceError(f"{where}: field 'gpu': {n} is not a GPU count (0 to 1024)")
        if n == 0:
            continue
        model = r["model"]
        gpu = gpu_map.get(model)
        if gpu is None:
            raise TraceError(
                f"{where}: GPU model '{model}' has no GPU type; add --gpu-map {model}=TYPE "
                f"(TYPE one of {', '.join(sorted(known))})"
            )
        if gpu not in known:
            raise TraceError(
                f"--gpu-map {model}={gpu}: the throughput table has no GPU type '{gpu}'; it "
                f"knows {', '.join(sorted(known))}"
            )
        gpus_of[gpu] += n
        sizes.setdefault(gpu, Counter())[n] += 1
    parts = []
    for gpu in sorted(gpus_of):
        per_node = max(sizes[gpu].items(), key=lambda kv: (kv[1], kv[0]))[0]
        nodes = round(gpus_of[gpu] * scale / per_node)
        if nodes >= 1:
            parts.append(f"{gpu}:{nodes}x{per_node}")
    if not parts:
        raise TraceError(f"{origin}: no GPU node left at --scale {scale}; use a larger scale")
    return ",".join(parts)
