"""`slurm-gavel status` columns: squeue-like field letters and names, Slurm's time format.

`-o/--format` takes either squeue's `%` form (``"%.8i %u %j"``: `%[.][WIDTH]LETTER`,
a dot right-justifies, a width truncates like squeue's) or a comma-separated list
of field names (``"jobid,user,jobtype:30"``: `NAME[:WIDTH]`, like `squeue -O`).
The letters that squeue has mean the same thing here (%j is the job type: the
name a managed job is known by to the scheduler); the scheduler's own columns
(allocation, received, restarts, gputype) have names only. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurm_gavel.commands.mold_text import gpus_cell
from slurm_gavel.errors import InputError

Job = dict[str, Any]


def slurm_time(seconds: float | None) -> str:
    """Slurm's elapsed-time format, `[D-]HH:MM:SS` (squeue's TIME column, zero padded)."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


@dataclass(frozen=True)
class Field:
    name: str
    letter: str | None  # squeue's letter for the same thing, if it has one
    header: str
    value: Callable[[Job, list[str]], str]  # (job, the GPU types) -> cell
    help: str


def _nodes(j: Job) -> str:
    return ",".join(f"{n}" if g == 1 else f"{n}x{g}" for n, g in j.get("nodes") or []) or "-"


def _per_type(values: dict[str, float], types: list[str], fmt: Callable[[float], str]) -> str:
    return "/".join(fmt(values.get(t, 0.0)) for t in types)


def _alloc(j: Job, types: list[str]) -> str:
    both = {
        t: j["allocation"].get(t, 0.0) + j["paired_allocation"].get(t, 0.0)
        for t in {*j["allocation"], *j["paired_allocation"]}
    }
    return _per_type(both, types, lambda x: f"{x:.2f}")


FIELDS = [
    Field("jobid", "i", "JOBID", lambda j, _: str(j["id"]), "job id"),
    Field("partition", "P", "PARTITION", lambda j, _: j.get("partition") or "-", "partition"),
    Field("user", "u", "USER", lambda j, _: j.get("user") or str(j.get("user_id") or "-"), "user"),
    Field("account", "a", "ACCOUNT", lambda j, _: j.get("account") or "-", "Slurm account"),
    Field(
        "jobtype",
        "j",
        "JOBTYPE",
        lambda j, _: j.get("job_type") or "(none)",  # none: submitted without a type hint
        "job type, in full ((none): no type given, its row is learned)",
    ),
    Field("gpus", "b", "GPUS", lambda j, _: gpus_cell(j), "GPUs it needs (moldable: N (MIN-MAX))"),
    Field("state", "T", "STATE", lambda j, _: j.get("state") or "?", "scheduler state"),
    Field("time", "M", "TIME", lambda j, _: slurm_time(j.get("time_s")), "time it ran"),
    Field("gputype", None, "GPU_TYPE", lambda j, _: j.get("gpu_type") or "-", "type it runs on"),
    Field("nodelist", "N", "NODELIST", lambda j, _: _nodes(j), "nodes (xN: GPUs there)"),
    Field("allocation", None, "ALLOC", _alloc, "time fraction per GPU type"),
    Field(
        "received",
        None,
        "RECEIVED",
        lambda j, types: _per_type(j["received_s"], types, slurm_time),
        "time received per GPU type",
    ),
    Field("restarts", None, "RESTARTS", lambda j, _: str(j.get("restarts", 0)), "restarts"),
    Field("reason", "R", "REASON", lambda j, _: j.get("why") or "-", "the round's decision"),
]
BY_NAME = {f.name: f for f in FIELDS}
BY_LETTER = {f.letter: f for f in FIELDS if f.letter}
DEFAULT = [
    "jobid", "partition", "user", "account", "jobtype", "gpus", "state", "time",
    "gputype", "nodelist", "allocation", "received", "restarts",
]  # fmt: skip


@dataclass(frozen=True)
class Column:
    field: Field
    width: int | None = None  # None: as wide as the widest value (nothing cut)
    right: bool = False


_PERCENT = re.compile(r"%(\.)?(\d*)([A-Za-z])")


def parse_format(text: str) -> list[Column]:
    """`-o` in either form (module docstring); InputError naming the bad part."""
    if "%" in text:
        cols = []
        rest = _PERCENT.sub("", text)
        if rest.strip():
            raise InputError(f"--format {text!r}: only %-fields separated by spaces are known")
        for dot, width, letter in _PERCENT.findall(text):
            f = BY_LETTER.get(letter)
            if f is None:
                raise InputError(f"--format: unknown field %{letter}; known: {_known()}")
            cols.append(Column(f, int(width) if width else None, bool(dot)))
        return cols
    cols = []
    for part in text.split(","):
        name, _, width = part.strip().partition(":")
        f = BY_NAME.get(name.lower())
        if f is None or (width and not width.isdigit()):
            raise InputError(f"--format: unknown field {part.strip()!r}; known: {_known()}")
        cols.append(Column(f, int(width) if width else None))
    if not cols:
        raise InputError("--format is empty")
    return cols


def _known() -> str:
    return ", ".join(f"{f.name} (%{f.letter})" if f.letter else f.name for f in FIELDS)


def format_help() -> str:
    return "; ".join(f"%{f.letter} or {f.name}" if f.letter else f.name for f in FIELDS)


def table(jobs: list[Job], columns: list[Column], types: list[str], header: bool) -> list[str]:
    """The rows (and the header row) of `jobs`, columns two spaces apart."""
    tw = "/".join(types)
    per_type = ("allocation", "received")
    heads = [
        f"{c.field.header}({tw})" if c.field.name in per_type and tw else c.field.header
        for c in columns
    ]
    cells = [[c.field.value(j, types) for c in columns] for j in jobs]
    widths = []
    for i, c in enumerate(columns):
        widest = max([len(heads[i]), *(len(r[i]) for r in cells)])
        widths.append(c.width if c.width is not None else widest)
    out = []
    for row in ([heads] if header else []) + cells:
        parts = []
        for i, c in enumerate(columns):
            cell = row[i][: widths[i]]
            parts.append(cell.rjust(widths[i]) if c.right else cell.ljust(widths[i]))
        out.append("  ".join(parts).rstrip())
    return out
