"""Each managed job's own throughput row as `status` and `explain` show it:
per GPU type its steps/s, what backs the figure (measured, prior, estimated,
type-blind) and how many seconds on that type back a measurement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurm_gavel.core.learned_rows.job_rows import Knowledge, RowSource
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import ObservedJob
from slurm_gavel.errors import InputError

RowView = Callable[[ObservedJob], dict[str, dict[str, Any]] | None]


def row_view(state: SchedulerState, config: SchedulerConfig) -> RowView | None:
    """The view of each job's row the last round used; None under TABLE knowledge (the
    type's row: status shows the table's unmeasured cells instead) or before a round."""
    if config.knowledge is Knowledge.TABLE or state.caches.cluster_rows is None:
        return None
    learned = state.plugins.learned_rows
    source = RowSource(config.knowledge, state.caches.cluster_rows, learned, config.given_rows)
    measured = learned.measured

    def view(o: ObservedJob) -> dict[str, dict[str, Any]] | None:
        try:
            row = source.row(o)
        except InputError:
            return None
        cells = measured.get(o.job.id, {})
        out: dict[str, dict[str, Any]] = {}
        for t, mark in source.marks(o).items():
            m = cells.get(t)
            out[t] = {
                "steps_per_s": row.get(t),
                "backed_by": mark,
                "seconds": None if m is None else m.seconds,
            }
        return out

    return view
