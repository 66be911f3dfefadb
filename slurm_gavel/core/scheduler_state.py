"""What the scheduler remembers between rounds: SchedulerState and its JSON form.

All fairness accounting (time received per job and GPU type, rounds, the last
placement, steps done) lives here, in plain dataclasses that round-trip through
JSON: the daemon writes the state atomically after every round and reloads it
after a restart. Backends keep none of it, because Slurm cannot tell how many
rounds a job got.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurm_gavel.core.cluster_rows import ClusterRows, MarkedCell
from slurm_gavel.core.learned_rows import job_rows_doc
from slurm_gavel.core.learned_rows.job_rows import JobRows
from slurm_gavel.core.mechanism import MechanismJob, SingleCandidates
from slurm_gavel.core.moldable import mold_memory_doc
from slurm_gavel.core.moldable.mold_round import MoldMemory
from slurm_gavel.core.restart_aware import run_protection
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.core.restart_costs import restart_costs
from slurm_gavel.core.skips import Skip
from slurm_gavel.domain.cluster_model import Allowed, JobPlacement
from slurm_gavel.domain.model import Allocation, GpuType, Job, JobId, PairShare
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError

STATE_FORMAT = "slurm-gavel-scheduler-state/1"


@dataclass
class JobAccount:
    """The scheduler's memory of one managed job."""

    received_s: dict[GpuType, float] = field(default_factory=dict)  # cumulative, per type
    rounds: int = 0  # rounds in which it was placed
    steps_done: float = 0.0
    restarts: int = 0
    first_start: float | None = None


@dataclass
class PluginSlots:
    """What the round's plugins (round_plugins.py) keep between rounds, each in a slot
    of its own with its JSON form in its own module; in the state JSON as "plugins",
    by the plugin's name."""

    # restart-aware rounds: each job's run start and protection (run_protection.py)
    restart_aware: dict[JobId, RunProtection] = field(default_factory=dict)
    # measured restart costs: each job's, in seconds, as the daemon measured them
    # (restart_costs.py); what restart_aware.restart_cost takes before any default
    restart_costs: dict[JobId, float] = field(default_factory=dict)
    # learned rows: each job's measured throughputs (job_rows.py), under LEARNED
    # knowledge; in the JSON when there are any (job_rows_doc.py)
    learned_rows: JobRows = field(default_factory=JobRows, repr=False, compare=False)
    # moldable counts: the moldable jobs' counts and per-count rates (mold_round.py);
    # in the JSON, what was measured (mold_memory_doc.py): the counts themselves come
    # from the running jobs again, the rest is rebuilt
    moldable_counts: MoldMemory = field(default_factory=MoldMemory, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        protection = run_protection.to_json(self.restart_aware)
        if protection:
            out[run_protection.NAME] = protection
        if self.restart_costs:
            out[restart_costs.NAME] = restart_costs.to_json(self.restart_costs)
        rows = job_rows_doc.rows_to_json(self.learned_rows)
        if rows is not None:
            out[job_rows_doc.NAME] = rows
        molds = mold_memory_doc.to_json(self.moldable_counts)
        if molds is not None:
            out[mold_memory_doc.NAME] = molds
        return out

    @staticmethod
    def from_json(doc: Any, old: Mapping[str, Any]) -> PluginSlots:
        """The slots from the state JSON's "plugins". A file of before the slots kept
        restart-aware protection and the measured restart cost in each job's account
        and the learned rows at the top level (``old``: the whole document), where
        they are read from then.
        Untrusted figures are dropped, not refused: a run is placed as the allocation
        says, a job relearns its row."""
        slots = doc if isinstance(doc, Mapping) else {}
        rows = slots[job_rows_doc.NAME] if job_rows_doc.NAME in slots else old.get("job_rows")
        return PluginSlots(
            restart_aware=run_protection.from_state(slots, old.get("jobs")),
            restart_costs=restart_costs.from_state(slots, old.get("jobs")),
            learned_rows=job_rows_doc.rows_from_json(rows)[0],
            moldable_counts=mold_memory_doc.from_json(slots.get(mold_memory_doc.NAME)),
        )


@dataclass
class RoundMemo:
    """What a round derived from its job set, for the next round to reuse when the
    backend reports the very same Job objects (round_jobs.round_jobs). Transient."""

    table: ThroughputTable  # compared by identity: the rows below came from it
    jobs: tuple[Job, ...]  # the active jobs' Job objects, compared by identity
    allowed: tuple[Allowed | None, ...]  # and what limited each (ObservedJob's)
    waiting_on: tuple[str | None, ...]
    capacity: dict[GpuType, int]
    considered: list[tuple[int, Mapping[GpuType, float]]]  # (index into active, row)
    skipped: list[tuple[JobId, Skip]]
    key: str
    unmeasured: tuple[MarkedCell, ...] = ()
    rows_revision: int = 0  # JobRows.revision the rows above were built at
    mechanism_jobs: dict[JobId, MechanismJob] = field(default_factory=dict)
    # mechanism.single_candidates() of `singles_for` (an allocation, by identity)
    singles_for: Allocation | None = None
    singles: SingleCandidates | None = None
    # the indices into `considered` whose row differs from `apart_for`'s (an allocation,
    # by identity) allocation_rows (scheduler._rows_apart)
    apart_for: Allocation | None = None
    apart: list[int] = field(default_factory=list)


@dataclass
class RoundCaches:
    """What rounds derived and keep only to save work, never state: not in the JSON; a
    reloaded state starts without them and derives the same again."""

    # what the last round derived from its job set, reused while the backend reports
    # the very same Job objects (the simulator between arrivals and completions)
    memo: RoundMemo | None = None
    # the table's rows completed for the cluster's GPU types, kept while the table (by
    # identity) and the types stay the same (cluster_rows.py)
    cluster_rows: ClusterRows | None = None


@dataclass
class SchedulerState:
    round_index: int = 0
    last_round_time: float | None = None  # backend clock when the last round acted
    # allocation in force and the job set / capacity it was computed for
    allocation: Allocation | None = None
    allocation_key: str = ""
    allocation_time: float | None = None
    # each considered job's row when the allocation was computed (relearn.py compares
    # today's rows against them); in the JSON, so a restarted daemon decides the same
    allocation_rows: dict[JobId, Mapping[GpuType, float]] = field(default_factory=dict)
    # time received per entry (job id or pair key) and type since the allocation
    # was computed, and the wall time since then: the mechanism's priorities.
    epoch_received: dict[str, dict[GpuType, float]] = field(default_factory=dict)
    epoch_elapsed: float = 0.0
    jobs: dict[JobId, JobAccount] = field(default_factory=dict)
    placement: dict[JobId, JobPlacement] = field(default_factory=dict)  # last round's
    # what the round's plugins keep between rounds, each in its own slot
    plugins: PluginSlots = field(default_factory=PluginSlots)
    # Not state: what rounds derived and keep only to save work (RoundCaches)
    caches: RoundCaches = field(default_factory=RoundCaches, repr=False, compare=False)

    # ---- JSON --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data. Each job's records are copies (the daemon keeps their JSON
        text between saves while they are equal to the last: daemon/state_encode.py,
        which needs them not to change after); epoch_received is the live dict."""
        alloc = self.allocation
        return {
            "format": STATE_FORMAT,
            "round_index": self.round_index,
            "last_round_time": self.last_round_time,
            "allocation": None
            if alloc is None
            else {
                "policy": alloc.policy,
                "fractions": {j: dict(row) for j, row in alloc.fractions.items()},
                "pairs": [
                    {"jobs": list(p.jobs), "fractions": dict(p.fractions)} for p in alloc.pairs
                ],
                "objective": alloc.objective,
            },
            "allocation_key": self.allocation_key,
            "allocation_time": self.allocation_time,
            "allocation_rows": {j: dict(row) for j, row in self.allocation_rows.items()},
            "epoch_received": self.epoch_received,
            "epoch_elapsed": self.epoch_elapsed,
            "jobs": {
                j: {
                    "received_s": dict(a.received_s),
                    "rounds": a.rounds,
                    "steps_done": a.steps_done,
                    "restarts": a.restarts,
                    "first_start": a.first_start,
                }
                for j, a in self.jobs.items()
            },
            "placement": {j: p.to_json() for j, p in self.placement.items()},
            **({"plugins": slots} if (slots := self.plugins.to_json()) else {}),
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], origin: str = "state") -> SchedulerState:
        if not isinstance(d, Mapping) or d.get("format") != STATE_FORMAT:
            raise InputError(
                f'{origin}: not a scheduler state (expected "format": "{STATE_FORMAT}"); '
                "delete it to start with fresh fairness accounting"
            )
        try:
            a = d.get("allocation")
            alloc = None
            if a is not None:
                alloc = Allocation(
                    policy=str(a["policy"]),
                    fractions={
                        str(j): {str(t): float(x) for t, x in row.items()}
                        for j, row in a["fractions"].items()
                    },
                    pairs=[
                        PairShare(
                            (str(p["jobs"][0]), str(p["jobs"][1])),
                            {str(t): float(x) for t, x in p["fractions"].items()},
                        )
                        for p in a["pairs"]
                    ],
                    objective=a.get("objective"),
                )
            return SchedulerState(
                round_index=int(d["round_index"]),
                last_round_time=d.get("last_round_time"),
                allocation=alloc,
                allocation_key=str(d.get("allocation_key", "")),
                allocation_time=d.get("allocation_time"),
                allocation_rows={
                    str(j): {str(t): float(v) for t, v in row.items()}
                    for j, row in (d.get("allocation_rows") or {}).items()
                },
                epoch_received={
                    str(k): {str(t): float(v) for t, v in row.items()}
                    for k, row in d["epoch_received"].items()
                },
                epoch_elapsed=float(d["epoch_elapsed"]),
                jobs={
                    str(j): JobAccount(
                        received_s={str(t): float(v) for t, v in a["received_s"].items()},
                        rounds=int(a["rounds"]),
                        steps_done=float(a["steps_done"]),
                        restarts=int(a["restarts"]),
                        first_start=a.get("first_start"),
                    )
                    for j, a in d["jobs"].items()
                },
                placement={str(j): JobPlacement.from_json(p) for j, p in d["placement"].items()},
                plugins=PluginSlots.from_json(d.get("plugins"), d),
            )
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise InputError(
                f"{origin}: malformed scheduler state ({type(e).__name__}: {e}); "
                "delete it to start with fresh fairness accounting"
            ) from e


def fresh_state() -> SchedulerState:
    return SchedulerState()


def copy_state(state: SchedulerState) -> SchedulerState:
    """The state as a restarted daemon reads it back: to_json, through JSON text (as
    the daemon writes state.json and copies the state before each round), from_json.
    Nothing transient survives (the memo, the rows' caches, what the moldable memory
    derives), and the next round computes from the copy what it computes from
    ``state`` (docs/design.md, "Canonical re-solves"; the simulator's
    ``reload_state_every`` runs whole traces so)."""
    text = json.dumps(state.to_json(), separators=(",", ":"))
    return SchedulerState.from_json(json.loads(text))
