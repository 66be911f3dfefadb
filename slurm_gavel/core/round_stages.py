"""The round's stages and what a feature plugs into them.

A round (scheduler.run_round) is a fixed pipeline, the same in the daemon and the
simulator:

    observe -> account -> enrich -> consider -> allocate -> keep -> assign -> act -> after act

observe, account, consider, allocate and act are the round's own; the stages in
between are where features plug in, in the manner of the Kubernetes scheduler
framework: each stage is a small interface, a feature implements the stages it needs
(round_plugins.py has them all), and the pipeline is chosen from the config once, by
``round_plugins.pipeline_for``, so that the round itself has no feature branch.

* **enrich** rewrites the round's active jobs before anything is decided about them
  (a moldable job at this round's GPU count) or learns from them (measured rates into
  each job's own row).
* **pose** (in allocate) adds to the policy's problem what the considered jobs alone
  do not say (the throughputs of pairs sharing GPUs), when the round re-solves. The
  ``Pose`` interface lives beside the problem it extends (round_jobs.py).
* **keep** names running jobs the round keeps exactly where they run, whatever the
  allocation says (runs on a node that stopped answering; restart-aware protection).
  Later plugins' keeps win over earlier ones'.
* **assign** turns the allocation into this round's placement for the jobs not kept
  (Gavel's mechanism; restart-aware rounds' own; a baseline that ignores the
  allocation). Exactly one per pipeline.
* **after act** looks at what the backend carried out (protecting the runs that
  started) and what it reported with the act (``ctx.result``: the restart costs the
  daemon measured, kept by the plugin that owns them).

Beside the stages, a plugin whose effect can change a later round's placement while
the job set stays the same (pairs that may form or split) answers **steady**: the
simulator jumps over rounds only when the round's own check
(scheduler.placement_is_stable) and every such plugin say they would repeat.

A plugin keeps what it learns in the round's context (``RoundContext.notes``, keyed by
the plugin's name) for the later stages of the same round; what must outlive the
round lives in the scheduler state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from slurm_gavel.core.cluster_rows import MarkedCell
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import Considered, Pose
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.core.skips import Skip
from slurm_gavel.domain.cluster_model import ActResult, ClusterSnapshot, JobPlacement, ObservedJob
from slurm_gavel.domain.model import GpuType, JobId


@dataclass
class RoundContext:
    """One round's inputs and what its stages have made of them so far."""

    state: SchedulerState
    config: SchedulerConfig
    snap: ClusterSnapshot
    now: float
    # the jobs still to run (enrich may replace them)
    active: list[ObservedJob]
    # GPUs per type the allocation is computed for (scheduler.allocation_capacity)
    capacity: dict[GpuType, int]
    # consider's output: the jobs the policy sees with their rows, the skipped ones
    # with why, the job set's key and the cells relied on unmeasured
    considered: list[Considered] = field(default_factory=list)
    skipped: list[tuple[JobId, Skip]] = field(default_factory=list)
    key: str = ""
    unmeasured: tuple[MarkedCell, ...] = ()
    # the keep stage's placements (assign leaves these jobs and their GPUs out)
    kept: dict[JobId, JobPlacement] = field(default_factory=dict)
    # the previous round's placement, as it was before this round acted
    previous: Mapping[JobId, JobPlacement] = field(default_factory=dict)
    # what the backend reported of the act (after act reads it)
    result: ActResult = field(default_factory=ActResult)
    # per plugin (by name), what it carries from one stage to a later one this round
    notes: dict[str, Any] = field(default_factory=dict)


class Plugin(Protocol):
    """What every stage's plugin has: the name its settings, slot and notes go by."""

    @property
    def name(self) -> str: ...


class Enrich(Plugin, Protocol):
    def enrich(self, ctx: RoundContext) -> None: ...


class Keep(Plugin, Protocol):
    def keep(self, ctx: RoundContext) -> Mapping[JobId, JobPlacement]: ...


class Assign(Plugin, Protocol):
    def assign(self, ctx: RoundContext) -> dict[JobId, JobPlacement]: ...


class AfterAct(Plugin, Protocol):
    def after_act(self, ctx: RoundContext) -> None: ...


class Steady(Plugin, Protocol):
    def steady(self, state: SchedulerState, report: RoundReport) -> bool: ...


@dataclass(frozen=True)
class Pipeline:
    """The plugins of each stage, in order. ``allocates``: whether consider and
    allocate run (a baseline places the jobs itself and has no allocation);
    ``pose``: those that add to the policy's problem; ``steady``: those the
    simulator asks before it jumps over rounds (scheduler.placement_is_stable)."""

    assign: Assign
    enrich: tuple[Enrich, ...] = ()
    keep: tuple[Keep, ...] = ()
    after_act: tuple[AfterAct, ...] = ()
    allocates: bool = True
    pose: tuple[Pose, ...] = ()
    steady: tuple[Steady, ...] = ()

    def names(self) -> dict[str, list[str]]:
        """Each stage's plugins by name."""
        return {
            "enrich": [p.name for p in self.enrich],
            "pose": [p.name for p in self.pose],
            "keep": [p.name for p in self.keep],
            "assign": [self.assign.name],
            "after_act": [p.name for p in self.after_act],
            "steady": [p.name for p in self.steady],
        }
