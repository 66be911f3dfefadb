"""A job's node needs (fit.JobNeeds: --exclude, memory and CPUs per node, --prefer)
from its listing text, so that a job the daemon starts to manage needs no JSON read
(without this, the first round after a start read every managed job's JSON).

The listing prints (slurm/cli/listing.py, `squeue --noconvert`, so memory is whole
megabytes): ExcNodes (a hostlist; 22.05's --Format has no such field,
CliFormat.excluded_field: its second listing's `-o %x` is put in its place), MinMemory,
MinCPUs, cpus-per-tres, mem-per-tres, Prefer and tres-alloc. Each is Slurm's own
syntax, none user text but --prefer's expression (which slurmctld checks against the
nodes' features); a value with whitespace or one this parser does not know is not
trusted (None: the job's JSON is read).

MinMemory is --mem or --mem-per-cpu: squeue drops the per-CPU flag (_print_pn_min_memory
clears MEM_PER_CPU), so which one it is comes from tres-alloc, which for a job that never
ran is its request (`cpu=C,mem=T,node=N,...`, T in all): T = MinMemory x N says per
node, T = MinMemory x C per CPU. A requeued or requeue-held job prints its request
there too (an update of its memory or CPUs shows at once: 22.05, 24.11 and 26.05,
benchmarks/README.md). For a running job it is its allocation, which Slurm sizes the
same way (--mem on each node, --mem-per-cpu times the CPUs it got: C is then what it
got), under the needs it still has: a running job's memory and CPUs cannot be updated.
So a daemon that just started, with no record of its jobs, builds those that ran from
their text too. Where C = N (one CPU per node) both say the same memory
on every node for as long as the job's CPUs per node stay 1, which they do unless it asks
CPUs per GPU (fit.JobNeeds.on_node): the memory is then taken per node (the same
figures, though not the same field as its JSON); with CPUs per GPU, None. In any other
state (completing, suspended) None (its last needs are kept while its needs' text stays
the same: jobs_from_text._needs).
"""

from __future__ import annotations

import re

from slurm_gavel.backends.slurm.fields import expand_hostlist
from slurm_gavel.backends.slurm.fit import JobNeeds
from slurm_gavel.backends.slurm.from_json import _per_gpu as per_gpu

# The listing's fields read here (listing.LISTING_FIELDS names), in JobNeeds order.
NEEDS_FIELDS = (
    "features",
    "excluded_nodes",
    "memory_per_node",
    "memory_per_tres",
    "minimum_cpus_per_node",
    "cpus_per_tres",
    "prefer",
)
_UNSET = "(null)"
_MB = re.compile(r"([0-9]{1,12})([KMGTP]?)")
_TRES_MEM = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,4})?)([KMGTP]?)")
_UNIT_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
_INT = re.compile(r"[0-9]{1,9}")
# Whitespace as str.isspace() has it (the same characters; one C scan per value instead
# of a Python step per character: it ran on every new job of the first round)
_SPACE = re.compile(r"\s")
# T is printed rounded (62.50G): the two readings differ by C/N >= 2x, so 1% tells them
_CLOSE = 0.01


def needs_from_text(
    text: dict[str, str], *, tres_current: bool, excluded_listed: bool
) -> JobNeeds | None:
    """The JobNeeds job_needs makes of the job's JSON (or, for a job with one CPU per
    node, the same figures: module doc) from its listing values by field name (the
    NEEDS_FIELDS and "tres_req"); None where the text cannot say them. tres_current:
    tres-alloc was made under the needs the job has now (module doc)."""
    if not tres_current or not excluded_listed:
        return None
    if any(_SPACE.search(text[f]) for f in (*NEEDS_FIELDS, "tres_req")):
        return None
    memory = _mb(text["memory_per_node"])
    cpus = _int(text["minimum_cpus_per_node"])
    if memory is None or cpus is None:
        return None
    gpu_memory = per_gpu(_plain(text["memory_per_tres"]))
    gpu_cpus = per_gpu(_plain(text["cpus_per_tres"]))
    node_memory, cpu_memory = 0, 0
    if memory and not gpu_memory:
        kind = _memory_kind(text["tres_req"], memory, cpus, bad_if_unsure=gpu_cpus > 0)
        if kind is None:
            return None
        node_memory, cpu_memory = (memory, 0) if kind == "node" else (0, memory)
    return JobNeeds(
        features=_plain(text["features"]),
        excluded=tuple(expand_hostlist(_plain(text["excluded_nodes"]))),
        memory_per_node_mb=node_memory,
        memory_per_cpu_mb=cpu_memory,
        memory_per_gpu_mb=gpu_memory,
        cpus_per_node=max(1, cpus),
        cpus_per_gpu=gpu_cpus,
        prefer=_plain(text["prefer"]),
    )


def needs_text_same(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether two records print the same needs (tres-alloc aside: it turns from the
    request into the allocation when the job starts)."""
    return all(a[f] == b[f] for f in NEEDS_FIELDS)


def _memory_kind(tres: str, memory: int, node_cpus: int, *, bad_if_unsure: bool) -> str | None:
    """ "node" or "cpu": how the job's MinMemory is meant (module doc), or None.
    node_cpus: MinCPUs; a tres-alloc of fewer CPUs than that on each node was not made
    under the request the job has now (22.05 keeps `cpu=1` for a job whose
    --cpus-per-gpu=2 made MinCPUs 2 once job_submit.lua took its GPU request off)."""
    pairs = dict(p.partition("=")[::2] for p in tres.split(",")) if tres != "N/A" else {}
    cpus, nodes, total = _int(pairs.get("cpu", "")), _int(pairs.get("node", "")), None
    m = _TRES_MEM.fullmatch(pairs.get("mem", ""))
    if m:
        total = float(m.group(1)) * _UNIT_MB[m.group(2)]
    if not cpus or not nodes or total is None or cpus < node_cpus * nodes:
        return None
    if cpus == nodes:  # one CPU per node: either reading gives the same memory
        return None if bad_if_unsure else "node"
    for kind, want in (("node", memory * nodes), ("cpu", memory * cpus)):
        if abs(total - want) <= _CLOSE * want:
            return kind
    return None


def _plain(value: str) -> str:
    """A feature expression, host list or cpus/mem-per-tres as the JSON has it:
    "(null)" or "N/A" is none ("")."""
    return "" if value in (_UNSET, "N/A") else value


def _mb(value: str) -> int | None:
    m = _MB.fullmatch(value)
    if m is None:
        return None
    mb = int(m.group(1)) * _UNIT_MB[m.group(2)]
    return int(mb) if mb == int(mb) else None


def _int(value: str) -> int | None:
    return int(value) if _INT.fullmatch(value) else None
