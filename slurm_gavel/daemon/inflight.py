"""The inflight record: the placement a round was about to carry out when the daemon
saved its state before acting (crash safety, daemon.py). A restarted daemon that
finds one knows the killed round acted, and from when.

The save before acting holds the state from before the round; the record also carries
what the round had learned by then (its job rows, core/learned_rows/job_rows_doc.py: the jobs'
progress up to the round's observation, counted on the placement that ran through it),
which a restart takes when the round acted. Without it the next round would count the
interval from the round before across the act, both placements' steps over one's
seconds. Records saved before it was kept load with none.
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
    # The round's job rows as of its act, in the state file's form (rows_to_json;
    # empty_rows_json when it had none); None: a record from before they were kept,
    # whose save holds the rows of the round before in its scheduler state. A save
    # with a record that carries them leaves those out (daemon.py, before_act).
    job_rows: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "round_index": self.round_index,
            "time": self.time,
            "placement": {j: p.to_json() for j, p in self.placement.items()},
        }
        if self.job_rows is not None:
            out["job_rows"] = self.job_rows
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> Inflight:
        rows = d.get("job_rows")
        return Inflight(
            int(d["round_index"]),
            float(d["time"]),
            {str(j): JobPlacement.from_json(p) for j, p in d["placement"].items()},
            # checked where it is read (rows_from_json drops what is untrusted)
            rows if isinstance(rows, dict) else None,
        )
