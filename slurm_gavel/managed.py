"""Which Slurm jobs slurm-gavel manages, and what they declare about themselves.

A job is managed when its comment is ``gavel:type=<job type>[,key=value...]`` and
it sits in a partition the daemon manages (checked by the backend). The comment is
the transport on purpose: every Slurm version stores and reports it, sbatch/srun
accept ``--comment``, the SPANK plugin can fill it from ``--gavel-job-type``, and
a job_submit.lua can read it to hold the job on arrival.

Keys (only ``type`` is required):

    type=ResNet-50 (batch size 64)   the throughput table's job type
    scale=2                          GPUs (Gavel's scale factor); default 1
    weight=2.5                       priority weight; default 1
    steps=120000                     total steps, for finish-time policies
    slo=86400                        seconds after submission it should finish by

Values cannot contain ``,`` (the separator); job types in Gavel's table do not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_gavel.errors import InputError

PREFIX = "gavel:"
FORM = "--comment=gavel:type=<job type>[,scale=N][,weight=W][,steps=S][,slo=SECONDS]"
KEYS = ("type", "scale", "weight", "steps", "slo")


class ManagedCommentError(InputError):
    """A job comment starts with ``gavel:`` but cannot be read."""


@dataclass(frozen=True)
class ManagedSpec:
    """What a managed job declares in its comment."""

    job_type: str
    scale_factor: int | None = None  # None: take the job's GPU request, else 1
    priority_weight: float = 1.0
    total_steps: float | None = None
    slo: float | None = None

    def to_comment(self) -> str:
        parts = [f"type={self.job_type}"]
        if self.scale_factor is not None:
            parts.append(f"scale={self.scale_factor}")
        if self.priority_weight != 1.0:
            parts.append(f"weight={_num(self.priority_weight)}")
        if self.total_steps is not None:
            parts.append(f"steps={_num(self.total_steps)}")
        if self.slo is not None:
            parts.append(f"slo={_num(self.slo)}")
        return PREFIX + ",".join(parts)


def _num(x: float) -> str:
    """Exact and short: 120000 not 1.2e+05 (`:g` would round 1000001 to 1e+06)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def is_managed_comment(comment: str | None) -> bool:
    """True when the comment claims the job for slurm-gavel (it may still be malformed)."""
    return comment is not None and comment.strip().startswith(PREFIX)


def parse_comment(comment: str | None, *, job_id: str = "?") -> ManagedSpec | None:
    """The job's declaration, None when the comment does not start with ``gavel:``.

    Raises ManagedCommentError naming the job, the bad part and the expected form.
    """
    if not is_managed_comment(comment):
        return None
    assert comment is not None
    body = comment.strip()[len(PREFIX) :]
    seen: dict[str, str] = {}
    for part in body.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq:
            _fail(job_id, f"{part.strip()!r} is not key=value")
        if key not in KEYS:
            _fail(job_id, f"unknown key {key!r} (known: {', '.join(KEYS)})")
        if key in seen:
            _fail(job_id, f"key {key!r} appears twice")
        if not value:
            _fail(job_id, f"key {key!r} has no value")
        seen[key] = value
    if "type" not in seen:
        _fail(job_id, "no job type")
    return ManagedSpec(
        job_type=seen["type"],
        scale_factor=None if "scale" not in seen else _positive_int(job_id, seen["scale"]),
        priority_weight=_positive(job_id, "weight", seen.get("weight", "1")),
        total_steps=None if "steps" not in seen else _positive(job_id, "steps", seen["steps"]),
        slo=None if "slo" not in seen else _positive(job_id, "slo", seen["slo"]),
    )


def _fail(job_id: str, problem: str) -> None:
    raise ManagedCommentError(f"job {job_id}: gavel comment: {problem}; write {FORM}")


def _positive_int(job_id: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        _fail(job_id, f"scale={text!r} must be a whole number of GPUs >= 1")
    return value


def _positive(job_id: str, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        _fail(job_id, f"{key}={text!r} must be a positive number")
    return value
