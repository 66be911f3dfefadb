"""The fake Slurm's nodes and jobs, and what the shipped job_submit.lua does to a job at
submission (lua_arrival): plain data, changed only by FakeSlurm (cluster.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from slurm_gavel.domain.comment_grammar import (
    ManagedCommentError,
    is_managed_comment,
    parse_comment,
)
from slurm_gavel.domain.model import JobId

# Slurm's priority/basic gives each job a priority just below the last one's (the first
# one's, as the local test cluster shows it); held jobs have 0.
FIRST_PRIORITY = 4_294_901_760
# RequeueExitHold: a batch script exiting so is requeued and held (SPECIAL_EXIT).
REQUEUE_HOLD_EXIT = 99
# Slurm's own delay before a requeued job may run again: its EligibleTime.
REQUEUE_DELAY_S = 121
# What the reason of a held job reads: the Lua's hold at arrival, a requeue-hold and a
# job's own exit 99 alike; `scontrol hold` by an operator reads JobHeldAdmin.
HELD_USER = "JobHeldUser"
HELD_ADMIN = "JobHeldAdmin"


_TOPOLOGY = re.compile(r"^([A-Za-z0-9_.-]+):([1-9][0-9]*)x([1-9][0-9]*)$")
_GPUS = re.compile(r"^gpu(?::([A-Za-z0-9_.-]+))?:([0-9]+)$")


def parse_topology(text: str) -> list[tuple[str, list[str], int]]:
    """ "v100:2x4,k80:1x2" -> [(type, node names, GPUs per node), ...] (the local test
    cluster's --topology)."""
    out = []
    for part in text.split(","):
        m = _TOPOLOGY.match(part.strip())
        if m is None:
            raise ValueError(f"topology {part!r}: write TYPE:NODESxGPUS, e.g. v100:2x4")
        gpu_type, nodes, gpus = m.group(1), int(m.group(2)), int(m.group(3))
        out.append((gpu_type, [f"{gpu_type}-{i}" for i in range(1, nodes + 1)], gpus))
    return out


def gpu_request(text: str) -> tuple[str | None, int] | None:
    """ "gpu:2" / "gpu:v100:2" -> (type, count); None for anything else."""
    m = _GPUS.match(text)
    return None if m is None else (m.group(1), int(m.group(2)))


class OnSignal(StrEnum):
    """What a job's batch script does with the checkpoint signal."""

    CHECKPOINT = "checkpoint"  # saves and exits 99 (slurm_gavel.job, checkpoint_job.sh)
    IGNORE = "ignore"  # `trap '' USR1`: keeps running
    DIE = "die"  # no handler: the signal's default action kills it


@dataclass(frozen=True)
class Script:
    """A job's batch script, as far as Slurm sees it.
    runs_s: it exits by itself after this many seconds of a run (None: runs until stopped);
    exit_code: how it exits then; on_signal / checkpoint_s: what the checkpoint signal
    does, and how long its checkpoint takes before it exits 99."""

    runs_s: float | None = None
    exit_code: int = 0
    on_signal: OnSignal = OnSignal.CHECKPOINT
    checkpoint_s: float = 0.0


@dataclass
class FakeNode:
    name: str
    gpu_type: str | None
    gpus: int
    partitions: tuple[str, ...]
    features: frozenset[str]
    cpus: int
    memory_mb: int
    slurmd_start_time: int
    down: bool = False  # slurmd gone: Slurm declared it DOWN (its jobs were requeued)
    drain: bool = False
    reason: str = ""


@dataclass
class Alloc:
    node: str
    gpus: int


@dataclass
class FakeJob:
    """One job record: a plain job, or one task of an array (array_id set)."""

    number: int  # the record's own job id (an unsplit array task: its array's)
    comment: str
    partitions: tuple[str, ...]
    node_count: int
    cpus: int
    mem_per_node_mb: int  # 0: DefMemPerCPU per CPU
    gres: tuple[str | None, int] | None  # (type, per node): tres_per_node's gpu
    gres_total: tuple[str | None, int] | None  # tres_per_job's gpu (sbatch --gpus=)
    shards: int
    script: Script
    user: str
    user_id: int
    account: str
    submit_time: int
    priority: int
    reason: str
    state: str = "PENDING"
    array_id: int = 0
    task: int | None = None
    split: bool = True  # a task with a record of its own (started, or named alone)
    req_nodes: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    constraint: str = ""
    dependency: list[tuple[str, JobId, str]] = field(default_factory=list)  # kind, job, status
    begin_time: int = 0
    eligible_time: int = 0
    time_limit_s: float | None = None
    restarts: int = 0
    start_time: int = 0
    end_time: int = 0
    exit_code: int | None = 0
    exit_signal: int | None = None  # the signal that killed the last run's batch script
    alloc: list[Alloc] = field(default_factory=list)
    nodes_ran: tuple[str, ...] = ()  # the last run's nodes (kept on an ended record)
    run_started: float = 0.0  # the fake clock's time of this run's start
    exit_at: float | None = None  # when the script exits (its end or its checkpoint)
    exit_with: int = 0
    admin_comment: str = ""

    @property
    def name(self) -> JobId:
        """The id commands take: ARRAY_TASK for a task, the number otherwise."""
        return f"{self.array_id}_{self.task}" if self.task is not None else str(self.number)

    @property
    def held(self) -> bool:
        return self.priority == 0


class Refused(Exception):
    """The fake's job_submit.lua refused the submission (the text says why)."""


def lua_arrival(job: FakeJob, *, hold: bool) -> None:
    """What conf/slurm/job_submit.lua does to a submitted job whose comment claims it:
    refuse a comment the grammar refuses, move an untyped GPU request into scale=,
    keep a typed one per node, mark `sbatch --hold` as hold=user, and hold the job
    (priority 0). A plain job is left as it is."""
    if not job.comment or not (is_managed_comment(job.comment) or _near_miss(job.comment)):
        return
    try:
        spec = parse_comment(job.comment, job_id=str(job.number))
    except ManagedCommentError as e:
        raise Refused(f"slurm-gavel: {e}") from None
    if spec is None:
        raise Refused("slurm-gavel: 'gavel:' must open the comment, in lower case")
    if job.req_nodes:
        raise Refused("slurm-gavel: --nodelist/-w cannot be used with a gavel: job")
    per_node = job.gres[1] if job.gres else None
    typed = (job.gres or job.gres_total or (None, 0))[0]
    gpus = per_node * job.node_count if per_node is not None else None
    if gpus is None and job.gres_total is not None:
        gpus = job.gres_total[1]
    if gpus is not None and spec.scale_factor is None and spec.scale_range is None:
        sep = "" if job.comment == "gavel:" else ","
        job.comment = f"{job.comment}{sep}scale={gpus}"
    if typed is not None:
        if job.gres is None and job.gres_total is not None:
            job.gres = (typed, -(-job.gres_total[1] // job.node_count))
        job.gres_total = None
    else:
        job.gres = job.gres_total = None
    if hold and not spec.user_hold:
        job.comment += ("" if job.comment == "gavel:" else ",") + "hold=user"
    job.priority = 0
    job.reason = HELD_USER


def _near_miss(comment: str) -> bool:
    return comment.lstrip(" \t\n\v\f\r")[:6].lower() == "gavel:"
