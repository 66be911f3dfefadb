"""The cells the daemon learns from progress reports, their votes and how they move.

Used by daemon/progress_learning.py (which reads the reports); kept in the daemon's state file
(:func:`cells_to_json`, :func:`cell_from_json`, which drops what cannot be trusted).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_gavel.core import estimate

ABSURD_FACTOR = estimate.ABSURD_FACTOR  # a rate this far from the cell is no measurement
STEP_FACTOR = 1.25  # the most a cell moves in one round, either way
QUORUM_USERS = 2
MAX_VOTES_PER_CELL = 64
MAX_VOTES_PER_USER = 8  # per cell
FORMAT = 3  # of the "progress" entry in the daemon's state file (3: pair cells)
READS = (2, 3)  # 2 had single cells only


@dataclass
class Vote:
    """A job's latest measured rate on a cell, as read at ``at`` (the daemon's clock)."""

    uid: int
    rate: float
    at: float


@dataclass
class Cell:
    """A learned cell: its value now, and the votes that move it. With a
    ``partner_type``, the job type's side of a pair cell (pair_cells.py)."""

    job_type: str
    scale_factor: int
    gpu_type: str
    value: float
    agreed: int = 0  # users who agreed at the last move; 0 = never moved
    votes: dict[str, Vote] = field(default_factory=dict)  # by job id
    partner_type: str | None = None

    def key(self) -> str:
        base = f"{self.job_type}|{self.scale_factor}|{self.gpu_type}"
        return base if self.partner_type is None else f"{base}|with|{self.partner_type}"


def finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def agreed_value(current: float, votes: list[float], quorum: int = QUORUM_USERS) -> float:
    """Where a cell at ``current`` goes this round, given one vote per user.

    Heads for the median of the votes, but upward no further than the ``quorum``-th
    largest vote and downward no further than the ``quorum``-th smallest (so at
    least ``quorum`` users claim the new value or beyond), and by at most STEP_FACTOR.
    Fewer than ``quorum`` votes: no move. One user can therefore never move a cell.
    """
    if len(votes) < quorum:
        return current
    v = sorted(votes)
    desired = statistics.median(v)
    if desired > current:
        target = min(desired, v[-quorum])
    elif desired < current:
        target = max(desired, v[quorum - 1])
    else:
        return current
    if (target - current) * (desired - current) <= 0:
        return current  # fewer than `quorum` users on the median's side
    return min(max(target, current / STEP_FACTOR), current * STEP_FACTOR)


def cells_to_json(cells: dict[str, Cell]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "cells": [
            {
                "job_type": c.job_type,
                "scale_factor": c.scale_factor,
                "gpu_type": c.gpu_type,
                "value": c.value,
                "agreed": c.agreed,
                "partner_type": c.partner_type,
                "votes": [
                    {"job": j, "uid": v.uid, "rate": v.rate, "at": v.at} for j, v in c.votes.items()
                ],
            }
            for c in cells.values()
        ],
    }


def cell_from_json(raw: Any, base_of: Callable[[Cell], float | None] | None) -> Cell | None:
    """A saved cell, or None when it cannot be trusted: malformed, not finite, not in the
    table (``base_of`` gives its reference; None: no table, its own value) or beyond
    MAX_DRIFT of it; votes over ABSURD_FACTOR off are dropped."""
    try:
        jt, sf, gpu = str(raw["job_type"]), int(raw["scale_factor"]), str(raw["gpu_type"])
        value, agreed = finite(raw["value"]), int(raw.get("agreed", 0))
        pt = raw.get("partner_type")
        if value is None:
            return None
        cell = Cell(jt, sf, gpu, value, agreed, partner_type=None if pt is None else str(pt))
        base = base_of(cell) if base_of is not None else value
        if base is None or not base / estimate.MAX_DRIFT <= value <= base * estimate.MAX_DRIFT:
            return None
        for v in raw.get("votes") or []:
            rate, at = finite(v["rate"]), finite(v["at"])
            if rate is None or at is None:
                continue
            if base / ABSURD_FACTOR <= rate <= base * ABSURD_FACTOR:
                cell.votes[str(v["job"])] = Vote(int(v["uid"]), rate, at)
        while len(cell.votes) > MAX_VOTES_PER_CELL:
            del cell.votes[min(cell.votes, key=lambda j: cell.votes[j].at)]
        return cell
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
