"""What the round sees of a cluster and what it asks of it: the domain types shared by
the scheduler, the mechanism, the backends, the simulator and the daemon.

The scheduler (slurm_gavel.core.scheduler) runs the same round against every backend:

    snapshot = backend.observe()          # what is there now
    ... policy + mechanism compute a RoundPlacement (pure functions) ...
    result = backend.act(placement)       # make the cluster match it

A backend (slurm_gavel.backends) implements :class:`ClusterBackend`: it only reports
what it can see and carries out placements. It never keeps fairness accounting:
Slurm cannot tell how many rounds a job received, so the time each job received per
GPU type lives in the scheduler's ``SchedulerState`` (serialisable, persisted by the
daemon), not here.

Everything here is a frozen dataclass of plain values, so snapshots and
placements can be logged, compared and written to JSON without adapters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from slurm_gavel.domain.model import GpuType, Job, JobId

_T = TypeVar("_T")


class cached_value(Generic[_T]):  # lower case: used like @property
    """A read-only property computed once per instance of a frozen dataclass.

    functools.cached_property takes a lock on every first access (Python 3.11),
    which cost more than the sums cached here; the round loop creates new
    placements every round, so first accesses are the common case.
    """

    def __init__(self, fn: Callable[[Any], _T]) -> None:
        self.fn = fn
        self.name = fn.__name__

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        if obj is None:
            return self  # accessed on the class (introspection, docs)
        value = self.fn(obj)
        obj.__dict__[self.name] = value  # later reads find it there, not here
        return value


class NodeState(StrEnum):
    """What a node is good for this round. Only UP nodes take new work; the jobs on a
    NOT_RESPONDING node are kept where they are (the scheduler never preempts them:
    they still run, and the checkpoint signal could not reach them), the jobs on the
    others are preempted or already lost (slurm_records.SlurmNode.condition says which
    Slurm state maps to which)."""

    UP = "up"  # schedulable
    DRAINED = "drained"  # running work may finish, nothing new may start (Slurm DRAIN)
    DOWN = "down"  # gone: jobs on it are lost
    # slurmd does not answer slurmctld, but the node is not (yet) DOWN: its jobs'
    # processes outlive slurmd, so they keep their place and time accounting.
    NOT_RESPONDING = "not_responding"
    FAILING = "failing"  # Slurm FAIL: expected to fail soon, treated like a drain
    REBOOTING = "rebooting"  # a reboot is requested or under way: nothing new
    POWERED_DOWN = "powered_down"  # power saving: off (or going off), nothing placed


class JobState(StrEnum):
    PENDING = "pending"  # waiting for the scheduler to place it (never ran, or requeued)
    RUNNING = "running"  # holds GPUs now
    HELD = "held"  # preempted and requeued-held, waiting for the next placement
    DONE = "done"  # finished (completed, failed or cancelled by its user); reported once


@dataclass(frozen=True)
class Node:
    """One machine: GPUs of a single type (Gavel's server)."""

    name: str
    gpu_type: GpuType
    gpus: int
    partition: str = ""
    state: NodeState = NodeState.UP
    # GPUs held by jobs the scheduler does not manage (Slurm's own business).
    gpus_held_unmanaged: int = 0

    # cached: the value is fixed (frozen), and the round loop asks for it for every
    # node several times per round
    @cached_value
    def usable_gpus(self) -> int:
        """GPUs managed jobs may use on this node in the coming round."""
        if self.state is not NodeState.UP:
            return 0
        return max(0, self.gpus - self.gpus_held_unmanaged)


@dataclass(frozen=True)
class NodeSlice:
    """`gpus` GPUs on node `node` (a job spread over nodes has one slice per node)."""

    node: str
    gpus: int


def slices_fit(slices: tuple[NodeSlice, ...], free: Mapping[str, int]) -> bool:
    """Every slice has that many GPUs free on its node (unknown nodes have none)."""
    for sl in slices:  # noqa: SIM110 - a loop, not all(genexpr): every job, every round
        if free.get(sl.node, 0) < sl.gpus:
            return False
    return True


@dataclass(frozen=True)
class Allowed:
    """The nodes a job's own request lets it run on (a typed GPU request, --constraint,
    --exclude, memory and CPUs per node: backends/slurm/fit.py), and why the others are
    left out. The round gives the job nothing on a GPU type none of them has and
    places it on these nodes only."""

    nodes: frozenset[str]
    types: frozenset[GpuType]  # the GPU types of those nodes
    why: str = ""
    # Of those, the nodes its --prefer names (a soft wish: tried first, never required);
    # None: no preference.
    preferred: frozenset[str] | None = None


@dataclass(frozen=True, init=False)
class ObservedJob:
    """A managed job as the backend sees it now."""

    job: Job
    state: JobState
    # Where it runs now (RUNNING only): its GPU type and its GPUs per node.
    gpu_type: GpuType | None = None
    nodes: tuple[NodeSlice, ...] = ()
    partner: JobId | None = None  # the job it shares its GPUs with, if space-sharing
    restarts: int = 0  # times it was (re)started after a preemption or failure
    # Steps done so far as the job last reported them; None when the backend cannot
    # know (the scheduler then keeps its own estimate).
    steps_done: float | None = None
    # Measured steps/s on its current placement, when the job reports it.
    measured_throughput: float | None = None
    # DONE only: when it finished (backend clock) and whether it succeeded.
    finish_time: float | None = None
    succeeded: bool = True
    # The numeric uid of the job's owner as Slurm records it (None where the backend
    # has no users, as in the simulator): the only owner a progress report may have.
    user_id: int | None = None
    # Waiting jobs only: why the cluster would not start it now whatever GPUs it got (a
    # dependency, a begin time, a limit), in words; None when it would. The round
    # gives such a job no GPUs and no fairness credit, and says why (round_jobs.py).
    waiting_on: str | None = None
    # Where its own request lets it run; None: on any node.
    allowed: Allowed | None = None
    # True when steps_done is the daemon's estimate from the time the job received
    # (it reports none), not the job's count: no evidence of its speed (row_trust.py).
    steps_estimated: bool = False

    # Written out instead of generated: a frozen dataclass's __init__ pays an
    # object.__setattr__ per field (3.6 us for ten), and the simulator makes
    # one of these per active job per round. Same signature, same frozen instance.
    def __init__(
        self,
        job: Job,
        state: JobState,
        gpu_type: GpuType | None = None,
        nodes: tuple[NodeSlice, ...] = (),
        partner: JobId | None = None,
        restarts: int = 0,
        steps_done: float | None = None,
        measured_throughput: float | None = None,
        finish_time: float | None = None,
        succeeded: bool = True,
        user_id: int | None = None,
        waiting_on: str | None = None,
        allowed: Allowed | None = None,
        steps_estimated: bool = False,
    ) -> None:
        # Every argument is a field of the same name (locals() holds just those here).
        fields = locals()
        del fields["self"]
        self.__dict__.update(fields)


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything the round needs to know about the cluster at one instant."""

    time: float  # backend clock (virtual seconds in the simulator, epoch seconds on Slurm)
    nodes: tuple[Node, ...]
    jobs: tuple[ObservedJob, ...]

    def capacity(self) -> dict[GpuType, int]:
        """Usable GPUs per type, in first-seen node order (stable)."""
        cap: dict[GpuType, int] = {}
        for n in self.nodes:
            cap[n.gpu_type] = cap.get(n.gpu_type, 0) + n.usable_gpus
        return cap

    def active_jobs(self) -> list[ObservedJob]:
        """Jobs the scheduler must place: pending, running or held (not done)."""
        return [j for j in self.jobs if j.state is not JobState.DONE]


def allocation_capacity(nodes: tuple[Node, ...]) -> dict[GpuType, int]:
    """GPUs per type the allocation is computed for: the usable ones (as
    ClusterSnapshot.capacity) plus those of NOT_RESPONDING nodes. Slurm ends that
    state in seconds (slurmd restarted) or declares the node DOWN after SlurmdTimeout:
    the allocation is not recomputed, nor its accounting epoch reset, for every slurmd
    restart; the mechanism still places nothing new there (usable_gpus is 0)."""
    cap: dict[GpuType, int] = {}
    for n in nodes:
        gpus = n.usable_gpus
        if n.state is NodeState.NOT_RESPONDING:
            gpus = max(0, n.gpus - n.gpus_held_unmanaged)
        cap[n.gpu_type] = cap.get(n.gpu_type, 0) + gpus
    return cap


@dataclass(frozen=True)
class JobPlacement:
    """Where one job runs during the coming round."""

    job_id: JobId
    gpu_type: GpuType
    nodes: tuple[NodeSlice, ...]  # sums to the job's scale factor
    partner: JobId | None = None  # space-sharing partner on the same GPUs
    # True when the job's GPUs sit on the fewest nodes possible for its size; False
    # means the table's unconsolidated throughput applies.
    consolidated: bool = True

    @cached_value
    def gpus(self) -> int:
        # cached (frozen value): the simulator reads it for every job at every step
        return sum(s.gpus for s in self.nodes)

    def same_place(self, other: JobPlacement | None) -> bool:
        """Lease extension test: same type, same GPUs per node, same partner."""
        if other is self:
            return True  # the common case (a kept placement), without sorting slices
        return (
            other is not None
            and other.gpu_type == self.gpu_type
            and sorted((s.node, s.gpus) for s in other.nodes)
            == sorted((s.node, s.gpus) for s in self.nodes)
            and other.partner == self.partner
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "gpu_type": self.gpu_type,
            "nodes": [[s.node, s.gpus] for s in self.nodes],
            "partner": self.partner,
            "consolidated": self.consolidated,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> JobPlacement:
        return JobPlacement(
            job_id=str(d["job_id"]),
            gpu_type=str(d["gpu_type"]),
            nodes=tuple(NodeSlice(str(n), int(g)) for n, g in d["nodes"]),
            partner=None if d.get("partner") is None else str(d["partner"]),
            consolidated=bool(d.get("consolidated", True)),
        )


@dataclass(frozen=True)
class RoundPlacement:
    """The round's plan: which jobs run where from `start` until the next round's plan.

    Jobs not in `jobs` must not run during the round (preempt them if they do).
    A space-sharing pair appears as two JobPlacements with the same nodes, each
    naming the other as partner.
    """

    round_index: int
    start: float
    jobs: Mapping[JobId, JobPlacement] = field(default_factory=dict)


@dataclass(frozen=True)
class ActResult:
    """What the backend did to carry out a placement."""

    started: tuple[JobId, ...] = ()  # were not running, now run (first start or restart)
    kept: tuple[JobId, ...] = ()  # ran already at the same place: lease extended
    preempted: tuple[JobId, ...] = ()  # ran, told to stop (checkpoint, requeue-hold)
    moved: tuple[JobId, ...] = ()  # ran elsewhere: preempted and started again
    failed: tuple[tuple[JobId, str], ...] = ()  # could not be carried out, with the reason
    # restarts the daemon measured with this act, (job, seconds): its restart clock
    # (daemon/restart_clock.py) reports them here, the round keeps them (restart_costs.py)
    restart_costs: tuple[tuple[JobId, float], ...] = ()


# The reason each job of a placement the daemon held back gets (it settles after a Slurm
# outage before it acts again): written by the daemon, read back from the status file
# by `status`, which imports no daemon.
SETTLING = "not acted on: settling after a Slurm outage"


@runtime_checkable
class ClusterBackend(Protocol):
    """What the round loop needs from a cluster. Implemented by SimulatedCluster and
    SlurmBackend; the scheduler talks to nothing else."""

    def observe(self) -> ClusterSnapshot:
        """The cluster now. DONE jobs are reported at least once after they finish."""
        ...

    def act(self, placement: RoundPlacement) -> ActResult:
        """Make the cluster match the placement: keep jobs whose JobPlacement is
        unchanged (no restart), preempt running jobs that are absent or placed
        elsewhere, start the rest. Must not raise for a single job's failure: report
        it in ActResult.failed and carry on with the others."""
        ...
