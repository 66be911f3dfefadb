"""The measured restart costs' own slot in the scheduler state: per job, the seconds a
restart of it costs as the daemon measured them (daemon/restart_clock.py), what
restart-aware rounds, moldable counts, learned rows and re-solves weigh a restart by
instead of the configured overhead (restart_aware.restart_cost).

The round receives the measurements as an input: the daemon's backend reports them
with the act (``ActResult.restart_costs``), and the RestartCosts plugin
(round_plugins.py) folds them in here after the act (``fold``). No one else writes
the slot. A state file written before the slots kept each figure in the job's
account (``restart_cost_s``); ``from_state`` reads it from there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from slurm_gavel.domain.model import JobId

NAME = "restart_costs"
# the slot of a round that measured nothing (read-only: shared)
NONE_MEASURED: Mapping[JobId, float] = MappingProxyType({})


def fold(
    slot: dict[JobId, float], measured: Iterable[tuple[JobId, float]], accounts: Mapping[JobId, Any]
) -> None:
    """This round's measurements into the slot: a job's learned cost is the mean of its
    last measurement and the one before (weight 1/2 each), so one odd restart moves it
    only halfway. Kept for the jobs with an account (the active ones): a job that ended
    leaves the slot with its account."""
    for job_id, cost in measured:
        if job_id in accounts:
            before = slot.get(job_id)
            slot[job_id] = cost if before is None else (before + cost) / 2.0
    if slot:
        for gone in [j for j in slot if j not in accounts]:
            del slot[gone]


def to_json(slot: Mapping[JobId, float]) -> dict[str, float]:
    return dict(slot)


def from_json(doc: Any) -> dict[JobId, float]:
    """The slot from its JSON; a figure that is not a finite number of seconds >= 0 is
    dropped: the job's restarts then cost what it declares or the configured overhead
    until it is measured again."""
    if not isinstance(doc, Mapping):
        return {}
    return {str(j): float(v) for j, v in doc.items() if _seconds(v)}


def from_state(slots: Mapping[str, Any], accounts: Any) -> dict[JobId, float]:
    """The slot from the state JSON's "plugins" (``slots``), else, in a state file of
    before the slot, from each job's account (``accounts``: its "jobs")."""
    if NAME in slots:
        return from_json(slots[NAME])
    if not isinstance(accounts, Mapping):
        return {}
    return from_json(
        {j: a.get("restart_cost_s") for j, a in accounts.items() if isinstance(a, Mapping)}
    )


def _seconds(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0.0
