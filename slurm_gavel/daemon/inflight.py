"""The inflight record: the placement a round was about to carry out when the daemon
saved its state before acting (crash safety, daemon.py). A restarted daemon that
finds one knows the killed round acted, and from when.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurm_gavel.domain.cluster_model import JobPlacement


@dataclass(frozen=True)
class Inflight:
    """A round that was about to act when the state was saved."""

    round_index: int
    time: float
    placement: dict[str, JobPlacement]

    def to_json(self) -> dict[str, Any]:
        return {
            "round_index": self.round_index,
            "time": self.time,
            "placement": {j: p.to_json() for j, p in self.placement.items()},
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Inflight:
        return Inflight(
            int(d["round_index"]),
            float(d["time"]),
            {str(j): JobPlacement.from_json(p) for j, p in d["placement"].items()},
        )
