"""What the Slurm backends know of a node and of a job, whatever the release:
SlurmNode (with the NodeState the scheduler makes of it), SlurmJob, the GpuSlice
a running job holds, and Slurm's job-state vocabulary (the one place it is written).
from_json.py builds them from Slurm's JSON (the CLI's and slurmrestd's alike).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_gavel.backends.slurm.fit import NO_NEEDS, JobNeeds
from slurm_gavel.domain.cluster_model import NodeState, cached_value
from slurm_gavel.domain.comment_grammar import CommentReading, read_comment

# Slurm's job states as `squeue -o %T` names them, by what they mean to the daemon.
# A job in one of RUNNING_STATES holds (or is leaving) its nodes and GPUs.
RUNNING_STATES = frozenset(
    {
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESIZING",
    }
)
# A job in one of WAITING_STATES waits to (re)start.
WAITING_STATES = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "RESV_DEL_HOLD"}
)
# Anything else (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
# BOOT_FAIL, DEADLINE, PREEMPTED, REVOKED) is finished.
#
# Both, as squeue's -t argument: what a round lists (finished jobs are asked for by id
# only when a managed job leaves this list). The order is the one the captures of
# tests/backends/data/ were made with; tests check it names exactly both sets.
ACTIVE_JOB_STATES = (
    "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,REQUEUE_HOLD,REQUEUE_FED,"
    "SPECIAL_EXIT,RESV_DEL_HOLD,STAGE_OUT,SIGNALING,RESIZING,STOPPED"
)
ACTIVE_STATES = RUNNING_STATES | WAITING_STATES


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # upper case: DRAIN, NOT_RESPONDING, ...
    gpu_type: str | None  # None: no typed GPU (untyped GPUs have no place in Gavel)
    gpus: int
    gpus_used: int  # GPUs busy: whole-allocated or with any shard in use
    partitions: tuple[str, ...]
    reason: str = ""
    # When the node's slurmd started (0: not reported, as in 23.11+ sinfo records): a
    # change means slurmd restarted (slurm/old_runs.py).
    slurmd_start_time: int = 0
    shards: int = 0  # gres/shard configured on the node (all its GPUs together)
    # GPUs beside gpu_type's (another type, or untyped): an untyped request may get
    # those, so a job's text cannot say the type of the GPUs it got there.
    other_gpus: int = 0
    # What a job's --constraint, memory and CPU request are checked against (fit.py):
    # the node's active features, its memory and CPUs and what jobs hold of them
    # (0 where Slurm does not report them: not counted).
    features: frozenset[str] = frozenset()
    memory_mb: int = 0
    memory_used_mb: int = 0
    cpus: int = 0
    cpus_used: int = 0

    @property
    def drained(self) -> bool:
        return self.state in ("drained", "draining", "drain") or bool(
            # (MAINTENANCE, a MAINT reservation's mark, is the reservation's business:
            # reservations.py keeps other jobs off and lets its own in)
            self.flags & {"DRAIN", "DRAINING", "DRAINED", "FAIL", "REBOOT_ISSUED"}
        )

    @property
    def down(self) -> bool:
        return self.state in ("down", "future", "unknown", "error") or bool(
            self.flags & {"NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN"}
        )

    @property
    def condition(self) -> NodeState:
        """What the scheduler makes of the node (NodeState), from Slurm's base state and
        flags as every release reports them (22.05: ``"mixed"`` + state_flags
        ``["NOT_RESPONDING"]`` or ``"MIXED+DRAIN"``; 23.02+: ``["MIXED", "DRAIN"]``).

        The order matters: a powered-down or rebooting node runs nothing (Slurm may
        show it DOWN meanwhile); a node Slurm declared DOWN has lost its jobs (Slurm
        requeues them), whatever else it says; a
        node whose slurmd does not answer still runs its jobs (their processes outlive
        slurmd), even when it is also drained or failing, so it is NOT_RESPONDING and
        its jobs are kept; FAIL and DRAIN take no new work."""
        flags = self.flags
        if flags & _POWER_FLAGS or self.state in ("powered_down", "power_down"):
            return NodeState.POWERED_DOWN
        if flags & _REBOOT_FLAGS or self.state == "reboot":
            return NodeState.REBOOTING
        if self.state == "down":
            return NodeState.DOWN
        if self.state in ("future", "unknown", "error"):
            return NodeState.DOWN  # never registered (or lost): it runs nothing known
        if "NOT_RESPONDING" in flags:
            return NodeState.NOT_RESPONDING
        if flags & {"FAIL", "FAILING"} or self.state in ("fail", "failing"):
            return NodeState.FAILING
        if self.drained:
            return NodeState.DRAINED
        return NodeState.UP


# Power saving: the node is off, going off, or booting for a job Slurm placed there.
_POWER_FLAGS = frozenset(
    {"POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_UP", "POWER_DRAIN"}
)
# `scontrol reboot`: requested (waits for the node to be idle, or drains it with ASAP),
# issued (rebooting now).
_REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"})


@dataclass(frozen=True)
class GpuSlice:
    node: str
    gpu_type: str | None
    gpus: int
    # For shards only: the GPUs of the node they sit on (gres_detail's IDX or, on
    # 24.11+, its per-GPU counts; () when Slurm names none). What shares a GPU and
    # how many GPUs shards cover are told by these indices (slurm/shard_pairs.py); whole
    # GPUs are counted by `gpus` (Slurm never hands out a GPU both whole and as
    # shards), so their indices are not kept, and a whole-GPU slice can be built from
    # the job's listing text, which names no index (slurm/cli/jobs_from_text.py).
    indices: tuple[int, ...] = ()
    shards: int = 0  # gres/shard held on those GPUs; 0: whole GPUs


def read_as_before(job: SlurmJob, before: SlurmJob | None) -> None:
    """Give ``job`` the reading of its comment that ``before`` (the same job's record
    of the last observe) made, when it is the same comment of the same job id: a record
    that changed elsewhere (its state, its nodes) is built anew every time it changes,
    and its comment need not be read again. Bounded by the jobs listed, unlike a memo
    of the grammar's; a comment that changed (scontrol update) is read anew."""
    if before is None or before is job:
        return
    reading = before.__dict__.get("reading")  # made by cached_value, if it was read
    if reading is None or before.job_id != job.job_id or before.comment != job.comment:
        return
    job.__dict__.setdefault("reading", reading)


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    # The state as `squeue -o %T` names it (22.05's job_state string): the base
    # state, or the flag that overrides it (SPECIAL_EXIT, COMPLETING, REQUEUED...).
    # (The other entries of a list-shaped job_state are not kept: nothing decides by
    # them, and the job listing, which prints only this name, can build the record.)
    state: str
    reason: str
    comment: str
    partitions: tuple[str, ...]
    nodes: tuple[str, ...]  # allocated (running) nodes, expanded
    gpu_request: tuple[str | None, int] | None  # (type, GPUs per node) from tres_per_node
    gpu_slices: tuple[GpuSlice, ...]  # what it holds now, per node (running only)
    node_count: int
    priority: int
    restarts: int
    submit_time: int
    start_time: int
    end_time: int  # when it ended; 0 while waiting or running (from_json._job)
    exit_code: int | None  # the process's exit code (not the wait status)
    account: str
    user: str
    # (type, GPUs in all) from tres_per_job (sbatch --gpus=v100:2)
    gpu_request_total: tuple[str | None, int] | None = None
    qos: str = ""
    user_id: int | None = None
    # When Slurm lets the job start at the earliest (a requeued job: requeue + ~121 s,
    # Slurm's own delay before a job runs again); 0 when unset.
    eligible_time: int = 0
    shard_request: int = 0  # gres/shard per node asked (tres_per_node)
    # Its dependency as squeue prints it ("afterok:12(unfulfilled)"); "" when none.
    dependency: str = ""
    # An array's meta record: the ids ("28_3") of the pending tasks it holds, each made
    # a job of its own by arrays.expand_tasks; () for any other record.
    array_tasks: tuple[str, ...] = ()
    # An array task's own record: its id as the daemon names it ("28_1"; job_id is the
    # record's own number until arrays.expand_tasks renames it); "" for any other.
    task_id: str = ""
    # Its task layout as asked (sbatch -n, --ntasks-per-node; 0: unset): with
    # node_count, what fixes the nodes it must run on (layout.py).
    tasks: int = 0
    tasks_per_node: int = 0
    # sbatch --deadline (epoch seconds; 0: none): Slurm ends a job that can no longer
    # finish by then, so the daemon gives such a job no GPUs (eligibility.py).
    deadline: int = 0
    # An array task's throttle (--array=0-5%2: 2; 0: none), on its own record and on
    # its array's meta record alike (arrays.throttled).
    array_max_tasks: int = 0
    # Its name (sbatch -J): with the owner's uid, what --dependency=singleton waits on
    # (eligibility.singleton_free).
    name: str = ""
    # --constraint, --exclude, memory and CPUs per node (fit.py); read from the JSON
    # (the listing's text keeps a managed job's last ones: slurm/cli/jobs_from_text.py).
    # Not compared: the text builds a plain job without them (nothing reads those).
    needs: JobNeeds = field(default=NO_NEEDS, compare=False)
    # --reservation (a name, or several joined by commas); "" for none.
    reservation: str = ""
    # Its time limit in minutes (--time, or the partition's default); None: unlimited.
    # Slurm keeps a job off a reservation that starts before the limit would end.
    time_limit_min: int | None = None
    # Built from the listing's text for a job whose comment does not claim it, where
    # the text could not say its comment, account, QOS or user name exactly ("" for
    # "(null)" and an unnamed uid, the text for a comment with "\r"): nothing reads
    # those of such a job (slurm/cli/jobs_from_text.py). Not compared.
    blanked: bool = field(default=False, compare=False)
    # The signal that ended its batch script (10: SIGUSR1), None when none did; read
    # from the JSON of an ended job (slurm/ended_runs.py). Not compared, as needs.
    exit_signal: int | None = field(default=None, compare=False)

    @cached_value
    def reading(self) -> CommentReading:
        """Its comment read once (domain/comment_grammar.py): the round, the give-back, the
        grace and the owner's holds all ask this, not the grammar again; and once per job
        while its comment stays the same (``read_as_before``)."""
        return read_comment(self.comment, job_id=self.job_id)

    @property
    def held(self) -> bool:
        return (
            self.priority == 0
            or self.reason.startswith("JobHeld")
            or self.state in ("SPECIAL_EXIT", "REQUEUE_HOLD")
        )
