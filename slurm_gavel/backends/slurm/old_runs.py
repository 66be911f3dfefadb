"""When a requeued job may run again: only once its previous run is gone from every node.

slurmd refuses to launch a job it still runs ("Job N already running, do not launch
second copy") and slurmctld then drains the node (Reason=Duplicate jobid). Slurm's
own guard is time: a requeued job is not eligible before requeue + ~121 s. The daemon
places jobs with StartTime=now, which cuts that delay short, so it needs its own
proof that the old run is over:

* normally Slurm gives it: a job leaves COMPLETING only once every node's slurmd
  reported the job's epilog done, i.e. its steps are gone. That holds while the
  nodes answer slurmctld.
* it does not hold when a node of the run stopped answering (slurmd stopped or
  restarted, the node NOT_RESPONDING or DOWN): slurmctld then requeues without the
  node's word (a DOWN node is dropped from the job), and the run's processes may
  still live there, since they outlive slurmd. When slurmd comes back it reports
  them and slurmctld has them killed, which takes up to KillWait.

So a job whose last run had a node that stopped answering, or whose slurmd restarted
during the run, is *unsure*: it is not started until each such node has answered
again for ``clear_s`` (KillWait plus a margin, read from Slurm). A node that stays
unreachable holds the job only until Slurm's own requeue delay has passed (its
eligible time): then the daemon waits as long as Slurm itself would, and places it
elsewhere (an unreachable node takes no work). Pure bookkeeping over parsed
observations; SlurmBackend feeds it every observe and asks it before starting jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.domain.cluster_model import NodeState
from slurm_gavel.domain.model import JobId

# States in which slurmctld cannot hear from the node's slurmd: a run there may
# outlive what slurmctld says about it.
UNREACHABLE = frozenset(
    {NodeState.NOT_RESPONDING, NodeState.DOWN, NodeState.POWERED_DOWN, NodeState.REBOOTING}
)
# What KillWait is when Slurm cannot be asked (Slurm's default), plus the margin.
DEFAULT_KILL_WAIT_S = 30.0
MARGIN_S = 5.0
# How long Slurm keeps a requeued job from starting (BeginTime = requeue + 121 s).
SLURM_REQUEUE_DELAY_S = 121.0


@dataclass
class _Run:
    nodes: tuple[str, ...]
    restarts: int
    seen_at: float  # first observation of this run
    unsure: set[str] = field(default_factory=set)  # nodes that lost touch since
    # When it was first seen over (waiting or done): a node losing touch later cannot
    # hold this run.
    ended_at: float | None = None


class OldRuns:
    """The last run of every managed job, and which of its nodes may still hold it."""

    def __init__(self, clear_s: float = DEFAULT_KILL_WAIT_S + MARGIN_S) -> None:
        self.clear_s = clear_s
        self.runs: dict[JobId, _Run] = {}
        self.unreachable: set[str] = set()  # at the last observation
        self.started: dict[str, int] = {}  # node -> its slurmd_start_time last seen
        self.back_since: dict[str, float] = {}  # node -> when it was seen answering again

    def observe(
        self,
        nodes: Iterable[SlurmNode],
        jobs: Iterable[SlurmJob],
        now: float,
        running_states: Iterable[str],
    ) -> None:
        running = set(running_states)
        nodes = list(nodes)
        unreachable = {n.name for n in nodes if n.condition in UNREACHABLE}
        restarted: set[str] = set()
        for n in nodes:
            before = self.started.get(n.name)
            if n.slurmd_start_time:
                if before is not None and n.slurmd_start_time != before:
                    restarted.add(n.name)
                self.started[n.name] = n.slurmd_start_time
        for name in (self.unreachable - unreachable) | (restarted - unreachable):
            self.back_since[name] = now
        for name in unreachable:
            self.back_since.pop(name, None)
        self.unreachable = unreachable
        lost_touch = unreachable | restarted
        listed: set[JobId] = set()
        for j in jobs:
            listed.add(j.job_id)
            run = self.runs.get(j.job_id)
            # A new run: RUNNING with other nodes or another restart count (a requeue
            # counts the restart while the old run is still COMPLETING: not a new run).
            new_run = j.state == "RUNNING" and (
                run is None or run.restarts != j.restarts or run.nodes != j.nodes
            )
            if j.nodes and (new_run or (run is None and j.state in running)):
                run = self.runs[j.job_id] = _Run(j.nodes, j.restarts, now)
            if run is not None and run.ended_at is None:
                # (a node that lost touch since the last observation may have done so
                # before the run ended: the run counts as unsure)
                run.unsure |= lost_touch & set(run.nodes)
                if j.state not in running:
                    run.ended_at = now
        for gone in [j for j in self.runs if j not in listed]:
            del self.runs[gone]

    def why_not_yet(self, job: SlurmJob, now: float) -> str | None:
        """Why the waiting `job` may not be started now (None: its old run is gone,
        or it has none)."""
        run = self.runs.get(job.job_id)
        if run is None or not run.unsure:
            return None
        for node in sorted(run.unsure):
            if node in self.unreachable:
                # Slurm's own delay has passed: no shorter than Slurm (its eligible
                # time, or Slurm's usual delay from when the run was seen over)
                eligible = job.eligible_time or ((run.ended_at or now) + SLURM_REQUEUE_DELAY_S)
                if eligible <= now:
                    continue
                return (
                    f"its previous run may still be on {node}, which does not answer "
                    "slurmctld; waiting for the node or for Slurm's requeue delay"
                )
            back = self.back_since.get(node)
            if back is not None and now - back < self.clear_s:
                return (
                    f"its previous run may still be on {node} (slurmd answered again "
                    f"{int(now - back)}s ago); waiting {self.clear_s:.0f}s for Slurm to "
                    "end it there, so the node is not drained for a duplicate job id"
                )
        run.unsure.clear()  # proven gone: no need to look again
        return None


def kill_wait_seconds(config_text: str) -> float | None:
    """KillWait from `scontrol show config` ("KillWait = 30 sec"), or None."""
    for line in config_text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "KillWait":
            word = value.split()[0] if value.split() else ""
            return float(word) if word.isdigit() else None
    return None


__all__ = ["DEFAULT_KILL_WAIT_S", "MARGIN_S", "UNREACHABLE", "OldRuns", "kill_wait_seconds"]
