"""Restart-aware rounds' own slot in the scheduler state: per job, when its current run
started and until when it is kept where it runs (restart_aware.py says why).

The round's plugins keep what must outlive a round in slots of their own
(scheduler_state.PluginSlots), each with its JSON form here beside its data, so that a
feature's state is found where the feature is and the rest of the state does not
change shape with it. A state file written before the slots existed kept these two
figures in each job's account; ``from_state`` reads them from there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurm_gavel.domain.model import JobId

NAME = "restart_aware"


@dataclass
class RunProtection:
    # when its current run started (restart_backing.py: a swap's first c / b seconds)
    run_started: float | None = None
    # its current run is kept where it is until then
    protected_until: float | None = None


def to_json(slot: Mapping[JobId, RunProtection]) -> dict[str, Any]:
    return {
        j: {k: v for k, v in (("run_started", p.run_started),
                              ("protected_until", p.protected_until)) if v is not None}
        for j, p in slot.items()
        if p.run_started is not None or p.protected_until is not None
    }  # fmt: skip


def from_json(doc: Any) -> dict[JobId, RunProtection]:
    """The slot from its JSON; an entry that is not two finite numbers (or null) is
    dropped: a run with no protection is placed as the allocation says, which is
    always safe."""
    out: dict[JobId, RunProtection] = {}
    if not isinstance(doc, Mapping):
        return out
    for j, v in doc.items():
        if not isinstance(v, Mapping):
            continue
        started, until = v.get("run_started"), v.get("protected_until")
        if _time(started) and _time(until) and (started is not None or until is not None):
            out[str(j)] = RunProtection(
                None if started is None else float(started),
                None if until is None else float(until),
            )
    return out


def from_state(slots: Mapping[str, Any], accounts: Any) -> dict[JobId, RunProtection]:
    """The slot from the state JSON's "plugins" (``slots``), else, in a state file of
    before the slots, from each job's account (``accounts``: its "jobs"), which held both."""
    if NAME in slots:
        return from_json(slots[NAME])
    if not isinstance(accounts, Mapping):
        return {}
    return from_json({j: a for j, a in accounts.items() if isinstance(a, Mapping)})


def _time(v: Any) -> bool:
    """Whether v is a clock value: none, or a finite number."""
    if v is None:
        return True
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
