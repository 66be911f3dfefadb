"""Pair cells learned from the progress reports of jobs that share a GPU.

A pair cell holds each job's steps/s while two jobs share GPUs (throughputs.py). The
daemon learns one *side* of it at a time: "job type A's rate when paired with B on
GPU type t, scale factor s", from the reports of A's jobs that Slurm shows sharing a
GPU with a B job (daemon/progress_learning.py: bounded, quorum of users, <= 1.25x a round).
:func:`update_pairs` folds the agreed sides into a table; a pair cell changed so is
marked as an estimate (its note starts with ``estimate:``) until ``slurm-gavel profile
--pairs`` measures it on a GPU node (profiler.merge writes a measured note).

Pure: no clock but the date in the note, no I/O.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_gavel.core.estimate import ABSURD_FACTOR, ESTIMATE_PREFIX, MAX_DRIFT
from slurm_gavel.domain.model import GpuType
from slurm_gavel.domain.throughputs import ThroughputTable, pair_note_key


@dataclass(frozen=True)
class PairObservation:
    """The agreed rate of ``job_type`` while sharing GPUs with a ``partner_type`` job."""

    job_type: str
    partner_type: str
    scale_factor: int
    gpu_type: GpuType
    steps_per_s: float
    users: int = 0  # users whose jobs agreed on it


def pair_reference(
    table: ThroughputTable, job_type: str, partner_type: str, scale_factor: int, gpu: GpuType
) -> float | None:
    """``job_type``'s side of the pair cell: what its reports are bounded around. None
    (nothing to learn) for a row the table lacks (a made-up job type), a pair the table
    says cannot share, or a side that cannot run (0)."""
    if not (table.has(job_type, scale_factor) and table.has(partner_type, scale_factor)):
        return None
    cell = table.pair(job_type, partner_type, scale_factor, gpu)
    if cell is None or not math.isfinite(cell[0]) or cell[0] <= 0:
        return None
    return cell[0]


def update_pairs(
    table: ThroughputTable, observations: Iterable[PairObservation]
) -> ThroughputTable:
    """A new table with the agreed sides in its pair cells, each marked as an estimate.

    Observations are hostile in origin: one without a :func:`pair_reference`, not
    finite and > 0, or over ABSURD_FACTOR off it is ignored; a value is kept within
    MAX_DRIFT of the reference in ``table``. A pair the table only derives (scale
    factor > 1 from scale factor 1) gets a cell of its own, the other side derived.
    """
    out = copy.deepcopy(table)
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    learned: dict[tuple[str, str, int, GpuType], list[str]] = {}
    for ob in observations:
        ref = pair_reference(table, ob.job_type, ob.partner_type, ob.scale_factor, ob.gpu_type)
        rate = ob.steps_per_s
        if ref is None or not math.isfinite(rate) or rate <= 0:
            continue
        if not ref / ABSURD_FACTOR <= rate <= ref * ABSURD_FACTOR:
            continue
        value = min(max(rate, ref / MAX_DRIFT), ref * MAX_DRIFT)
        a, b, sf = out.pair_key(ob.job_type, ob.partner_type, ob.scale_factor) or (
            ob.job_type,
            ob.partner_type,
            ob.scale_factor,
        )
        current = out.pair(a, b, sf, ob.gpu_type)
        if current is None:
            continue
        va = value if ob.job_type == a else current[0]
        vb = value if ob.job_type == b else current[1]
        out.pairs.setdefault((a, b, sf), {})[ob.gpu_type] = (va, vb)
        sides = learned.setdefault((a, b, sf, ob.gpu_type), [])
        sides.append(f"{ob.job_type}'s side ({ob.users} users agreed)")
    for (a, b, sf, gpu), sides in learned.items():
        out.notes[pair_note_key(a, b, sf, gpu)] = (
            f"{ESTIMATE_PREFIX} learned from paired jobs' progress reports, "
            f"{'; '.join(sides)}, {stamp}; measure with `slurm-gavel profile --pairs` on a GPU"
        )
    return out


def estimated_pair_cells(table: ThroughputTable) -> list[tuple[str, str, int, GpuType]]:
    """The pair cells of ``table`` noted as estimates, in the stored orientation."""
    return [
        (a, b, sf, gpu)
        for (a, b, sf), row in table.pairs.items()
        for gpu in row
        if (table.notes.get(pair_note_key(a, b, sf, gpu)) or "").startswith(ESTIMATE_PREFIX)
    ]
