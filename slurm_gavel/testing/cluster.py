"""FakeSlurm: an in-memory Slurm with its own clock, for tests of code that drives Slurm.

It keeps nodes (typed GPUs, features, partitions, CPUs and memory) and jobs (holds,
priority, requeue and requeue-hold, the checkpoint signal, arrays and their tasks,
dependencies, begin times, time limits), with the shipped job_submit.lua's arrival hold
of managed jobs (model.lua_arrival). Nothing happens on its own: a test submits jobs,
issues commands (as the daemon does, through FakeTransport, or as a job's owner), and
moves the clock with advance(), during which the fake's scheduler starts the released
jobs that fit and the jobs' scripts run, end, checkpoint or time out.

What it answers is what the real transports return (to_records.py builds the same
SlurmNode and SlurmJob records), and tests/backends/slurm/contract/ runs the same
scenarios against it and against each real Slurm release. It models Slurm as the
local test cluster configures it (tools/local-cluster: RequeueExitHold=99,
DefMemPerCPU, the Lua); see CONTRIBUTING.md, "Testing against the fake", for what it
covers and what it leaves out.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Iterator

from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut
from slurm_gavel.backends.slurm.user_holds import held_by_owner
from slurm_gavel.domain.model import JobId
from slurm_gavel.testing.clock import FakeClock
from slurm_gavel.testing.fakes import (
    FIRST_PRIORITY,
    HELD_ADMIN,
    HELD_USER,
    REQUEUE_DELAY_S,
    REQUEUE_HOLD_EXIT,
    Alloc,
    FakeJob,
    FakeNode,
    OnSignal,
    Script,
    gpu_request,
    lua_arrival,
    parse_topology,
)
from slurm_gavel.testing.owner import Owner
from slurm_gavel.testing.timeline import Scheduler

DEFAULT_TOPOLOGY = "v100:2x4,p100:2x4,k80:2x4"  # tools/local-cluster's
SHARED_PARTITION = "gpu"


class FakeSlurmError(Exception):
    """A command the fake refuses as Slurm would; the text is Slurm's error line."""


class FakeSlurm:
    """An in-memory Slurm (see the module notes). The default cluster is the local test
    cluster's: v100, p100 and k80 nodes, 2 of each with 4 GPUs, 16 CPUs and 64000 MB,
    the GPU type as a feature, a shared partition `gpu` and one per type."""

    def __init__(
        self,
        topology: str = DEFAULT_TOPOLOGY,
        *,
        clock: FakeClock | None = None,
        lua: bool = True,
        cpus: int = 16,
        memory_mb: int = 64000,
        def_mem_per_cpu_mb: int = 1000,
        kill_wait_s: float = 5.0,
        min_job_age_s: float = 300.0,
        sched_interval_s: float = 60.0,
        private_data: str = "none",
    ) -> None:
        self.clock = clock or FakeClock()
        self.lua = lua
        self.def_mem_per_cpu_mb = def_mem_per_cpu_mb
        self.kill_wait_s = kill_wait_s
        self.min_job_age_s = min_job_age_s
        self.private_data = private_data
        self.nodes: dict[str, FakeNode] = {}
        self.partitions: dict[str, list[str]] = {}
        self.jobs: list[FakeJob] = []
        self._index: dict[int, list[FakeJob]] = {}
        self._index_key: tuple[int, int, int] = (0, 0, 0)
        self._next_number = 1
        self._next_priority = FIRST_PRIORITY
        self.scheduler = Scheduler(self, sched_interval_s)
        self.owner = Owner(self)  # the commands a job's owner runs: owner.py
        if topology:
            self._build(topology, cpus, memory_mb)

    # --- the cluster ----------------------------------------------------------------

    def _build(self, topology: str, cpus: int, memory_mb: int) -> None:
        """The local test cluster's layout: TYPE-N nodes, all in `gpu`, each type in its
        own partition too (tools/local-cluster --partitions both)."""
        for gpu_type, names, _ in parse_topology(topology):
            self.partitions.setdefault(SHARED_PARTITION, []).extend(names)
            self.partitions[gpu_type] = list(names)
        for gpu_type, names, gpus in parse_topology(topology):
            for name in names:
                self.add_node(
                    name, gpu_type, gpus, (SHARED_PARTITION, gpu_type), {gpu_type}, cpus, memory_mb
                )

    def add_node(
        self,
        name: str,
        gpu_type: str | None,
        gpus: int,
        partitions: Iterable[str],
        features: Iterable[str] = (),
        cpus: int = 16,
        memory_mb: int = 64000,
    ) -> FakeNode:
        node = FakeNode(
            name, gpu_type, gpus, tuple(partitions), frozenset(features), cpus, memory_mb,
            slurmd_start_time=int(self.clock()) - 60,
        )  # fmt: skip
        self.nodes[name] = node
        for p in node.partitions:
            members = self.partitions.setdefault(p, [])
            if name not in members:
                members.append(name)
        return node

    def drain(self, name: str, reason: str = "drained by the test") -> None:
        self.nodes[name].drain = True
        self.nodes[name].reason = reason

    def resume(self, name: str) -> None:
        node = self.nodes[name]
        node.drain = node.down = False
        node.reason = ""

    # --- submission -----------------------------------------------------------------

    def submit(
        self,
        comment: str = "",
        *,
        partition: str = SHARED_PARTITION,
        gres: str | None = None,
        gpus: str | None = None,
        nodes: int = 1,
        cpus: int = 1,
        mem_mb: int = 0,
        array: Iterable[int] | None = None,
        dependency: str = "",
        begin: float | None = None,
        time_limit_s: float | None = None,
        hold: bool = False,
        script: Script | None = None,
        user: str = "root",
        user_id: int = 0,
        account: str = "",
        constraint: str = "",
        exclude: Iterable[str] = (),
        nodelist: Iterable[str] = (),
    ) -> JobId:
        """sbatch: the job's id (an array's id, whose tasks are ARRAY_TASK). gres is
        --gres (gpu:2, gpu:v100:2), gpus --gpus (2, v100:2); dependency as sbatch takes it
        (afterok:12, several with ","); begin: an absolute time; hold: sbatch --hold.
        Raises model.Refused where job_submit.lua refuses the job."""
        if partition not in self.partitions:
            raise FakeSlurmError("sbatch: error: invalid partition specified: " + partition)
        number = self._next_number
        tasks: list[int | None] = [*sorted(set(array))] if array is not None else [None]
        if not tasks:
            raise FakeSlurmError("sbatch: error: Invalid job array specification")
        deps = self._dependency(dependency)
        per_node = _gpu_request(gres) if gres else None
        total = _gpu_request("gpu:" + gpus) if gpus else None
        now = int(self.clock())
        made = []
        for t in tasks:
            job = FakeJob(
                number=number,
                comment=comment,
                partitions=(partition,),
                node_count=nodes,
                cpus=cpus,
                mem_per_node_mb=mem_mb,
                gres=per_node,
                gres_total=total,
                shards=0,
                script=script or Script(),
                user=user,
                user_id=user_id,
                account=account,
                submit_time=now,
                priority=1,
                reason="None",
                array_id=number if t is not None else 0,
                task=t,
                split=t is None,
                req_nodes=tuple(nodelist),
                excluded=tuple(exclude),
                constraint=constraint,
                dependency=[(k, j, "unfulfilled") for k, j in deps],
                begin_time=int(begin) if begin is not None else 0,
                eligible_time=int(begin) if begin is not None else 0,
                time_limit_s=time_limit_s,
            )
            if self.lua:
                lua_arrival(job, hold=hold)
            if job.priority:
                if hold:
                    job.priority, job.reason = 0, HELD_USER
                else:
                    job.priority = self.take_priority()
            made.append(job)
        self._next_number += 1
        self.jobs += made
        return str(number)

    def _dependency(self, text: str) -> list[tuple[str, JobId]]:
        out = []
        for part in filter(None, text.split(",")):
            kind, _, ids = part.partition(":")
            if kind not in ("after", "afterok", "afterany", "afternotok") or not ids:
                raise FakeSlurmError("sbatch: error: Job dependency problem")
            for target in ids.split(":"):
                if not any(j.name == target or str(j.number) == target for j in self.jobs):
                    raise FakeSlurmError("sbatch: error: Job dependency problem")
                out.append((kind, target))
        return out

    def take_priority(self) -> int:
        self._next_priority -= 1
        return self._next_priority

    # --- finding jobs ---------------------------------------------------------------

    def named(self, name: JobId) -> list[FakeJob]:
        """The records a command naming `name` acts on: a job, an array's task
        ("28_2", split off by being named alone) or a whole array ("28")."""
        if "_" in name:
            found = [j for j in self.jobs if j.name == name]
            for j in found:
                self._split(j)
            return found
        return list(self._by_number().get(int(name), ()))

    def _by_number(self) -> dict[int, list[FakeJob]]:
        """The records by job number and by array id, built again when the list of jobs
        or the numbers given out changed (a submit, a split, MinJobAge's pruning): a
        bench at 20,000 jobs names thousands of them per round."""
        key = (id(self.jobs), len(self.jobs), self._next_number)
        if self._index_key != key:
            index: dict[int, list[FakeJob]] = {}
            for j in self.jobs:
                index.setdefault(j.number, []).append(j)
                if j.array_id and j.array_id != j.number:
                    index.setdefault(j.array_id, []).append(j)
            self._index, self._index_key = index, key
        return self._index

    def job(self, name: JobId) -> FakeJob:
        found = self.named(name) if _valid_id(name) else []
        if len(found) != 1:
            raise KeyError(f"no job {name} (an array's id names every task)")
        return found[0]

    def _split(self, job: FakeJob) -> None:
        """A task named alone gets a record (and a job number) of its own."""
        if not job.split:
            job.split = True
            job.number = self._next_number
            self._next_number += 1

    def _each(self, ids: Iterable[JobId], errors: dict[JobId, str]) -> Iterator[FakeJob]:
        for name in ids:
            found = self.named(name) if _valid_id(name) else []
            if not found:
                errors[name] = f"Invalid job id specified for job {name}"
            yield from found

    # --- the daemon's commands (scontrol, scancel as an operator) --------------------

    def hold(self, ids: Iterable[JobId]) -> dict[JobId, str]:
        """scontrol hold: priority 0 (JobHeldAdmin); a running job keeps running. A
        waiting job's EligibleTime is cleared (22.05 to 26.05)."""
        errors: dict[JobId, str] = {}
        for j in self._each(ids, errors):
            if j.state in ("PENDING", "SPECIAL_EXIT", "RUNNING"):
                j.priority, j.reason = 0, HELD_ADMIN
            if j.state in ("PENDING", "SPECIAL_EXIT"):
                j.eligible_time = j.begin_time = 0
        return errors

    def release(self, ids: Iterable[JobId]) -> dict[JobId, str]:
        """scontrol release by the daemon; the Lua refuses to release a job its owner
        holds (hold=user in its comment)."""
        errors: dict[JobId, str] = {}
        for j in self._each(ids, errors):
            if held_by_owner(j.comment):
                errors[j.name] = (
                    f"slurm-gavel: job {j.name} is held by its owner (hold=user in its "
                    f"comment): only the owner's `scontrol release {j.name}` hands it back"
                )
            elif j.held and j.state in ("PENDING", "SPECIAL_EXIT"):
                j.priority, j.reason = self.take_priority(), "None"
                if j.state == "SPECIAL_EXIT":
                    j.state = "PENDING"
        return errors

    def update(
        self,
        name: JobId,
        *,
        partition: str,
        nodes: tuple[str, ...],
        gres: str,
    ) -> None:
        """scontrol update JobId= Partition= NumNodes=N-N NodeList= Gres= StartTime=now
        (a waiting job's placement, not released). Raises FakeSlurmError."""
        found = self.named(name) if _valid_id(name) else []
        if not found:
            raise FakeSlurmError(f"Invalid job id specified for job {name}")
        if len(found) > 1:
            raise FakeSlurmError(f"Job resizing not supported for job arrays for job {name}")
        job = found[0]
        if job.state not in ("PENDING", "SPECIAL_EXIT"):
            raise FakeSlurmError(f"Job is no longer pending execution for job {name}")
        unknown = [n for n in nodes if n not in self.nodes]
        if unknown or partition not in self.partitions:
            raise FakeSlurmError(f"Invalid node name specified for job {name}")
        if any(n not in self.partitions[partition] for n in nodes):
            raise FakeSlurmError(f"Requested node configuration is not available for job {name}")
        request = gpu_request(gres)
        if request is None:
            raise FakeSlurmError(f"Invalid generic resource (gres) specification for job {name}")
        job.partitions, job.req_nodes, job.node_count = (partition,), nodes, len(nodes)
        job.gres, job.gres_total = request, None
        now = int(self.clock())
        job.begin_time = job.eligible_time = now

    def signal(self, ids: Iterable[JobId], signal: str) -> dict[JobId, str]:
        """scancel --signal=SIG --batch: the batch script of each running job gets it.
        A job not running makes scancel retry "Job can not be altered now" until its
        timeout, as on the real cluster: SlurmActionTimedOut."""
        errors: dict[JobId, str] = {}
        for j in self._each(ids, errors):
            if j.state != "RUNNING":
                raise SlurmActionTimedOut(
                    f"scancel --signal={signal}: timed out (job {j.name} is {j.state}: "
                    "Job can not be altered now)"
                )
            script = j.script
            if script.on_signal is OnSignal.DIE:  # the default action: killed by it
                # no exit code, the signal recorded; the reason reads RaisedSignal on
                # 24.11+, JobLaunchFailure on 22.05 (contract: signal_without_a_handler)
                self.end(j, "FAILED", exit_code=None)
                j.exit_signal, j.reason = _signal_number(signal), "RaisedSignal"
            elif script.on_signal is OnSignal.CHECKPOINT and not script.checkpoint_s:
                self.requeue(j, state="SPECIAL_EXIT")  # saves and exits 99 at once
            elif script.on_signal is OnSignal.CHECKPOINT:
                exit_at = self.clock() + script.checkpoint_s
                if j.exit_at is None or exit_at < j.exit_at:
                    j.exit_at, j.exit_with = exit_at, REQUEUE_HOLD_EXIT
        return {k: f"scancel: error: Kill job error on job id {k}: {v}" for k, v in errors.items()}

    def requeuehold(self, ids: Iterable[JobId]) -> dict[JobId, str]:
        """scontrol requeuehold Incomplete: running jobs requeued and held; the others
        skipped without an error."""
        errors: dict[JobId, str] = {}
        for j in self._each(ids, errors):
            if j.state == "RUNNING":
                self.requeue(j, state="PENDING")
        return errors

    def set_comment(self, name: JobId, comment: str, gres: str | None = None) -> None:
        """scontrol update JobId= Comment= [Gres=gpu:G] by the daemon."""
        job = self.job(name)
        job.comment = comment
        if gres is not None:
            job.gres = _gpu_request(gres)

    def set_admin_comment(self, ids: Iterable[JobId], text: str) -> dict[JobId, str]:
        errors: dict[JobId, str] = {}
        for j in self._each(ids, errors):
            j.admin_comment = text
        return errors

    def cancel(self, name: JobId) -> None:
        """scancel: the job ends CANCELLED (its run, if any, killed at once)."""
        for j in self.named(name):
            if j.state in ("PENDING", "RUNNING", "SPECIAL_EXIT"):
                self.end(j, "CANCELLED", exit_code=0)

    # --- time -----------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass: each job's script ends, checkpoints or times out when
        due, and the scheduler starts what it can after each change."""
        self.scheduler.advance(seconds)

    # --- what runs change (the scheduler calls these) -----------------------------------

    def start(self, job: FakeJob, alloc: list[Alloc]) -> None:
        self._split(job)
        now = self.clock()
        job.state, job.reason, job.alloc = "RUNNING", "None", alloc
        job.start_time, job.run_started = int(now), now
        job.exit_code = 0  # a new run: the last run's exit 99 is not kept
        job.exit_signal = None
        job.nodes_ran = tuple(a.node for a in alloc)
        runs = job.script.runs_s
        job.exit_at = now + runs if runs is not None else None
        job.exit_with = job.script.exit_code

    def requeue(self, job: FakeJob, *, state: str) -> None:
        """A run requeued and held: by requeuehold (PENDING) or by its own exit 99
        (SPECIAL_EXIT). Slurm resets its submit time and delays its next run (121 s)."""
        now = int(self.clock())
        job.state, job.reason, job.priority = state, HELD_USER, 0
        job.restarts += 1
        job.alloc, job.exit_at = [], None
        job.submit_time = now
        job.start_time = job.eligible_time = now + REQUEUE_DELAY_S
        job.exit_code = REQUEUE_HOLD_EXIT if state == "SPECIAL_EXIT" else 0

    def end(self, job: FakeJob, state: str, *, exit_code: int | None) -> None:
        job.state, job.alloc, job.exit_at = state, [], None
        job.end_time, job.exit_code = int(self.clock()), exit_code
        job.reason = {"FAILED": "NonZeroExitCode", "TIMEOUT": "TimeLimit"}.get(state, "None")
        if job.task is not None:
            self._split(job)

    def forget_old(self) -> None:
        """MinJobAge: ended jobs leave Slurm's memory."""
        horizon = self.clock() - self.min_job_age_s
        self.jobs = [j for j in self.jobs if not (j.end_time and j.end_time < horizon)]


def _signal_number(name: str) -> int:
    """ "USR1" / "SIGUSR1" / "10" -> 10, as scancel --signal takes it."""
    if name.isdigit():
        return int(name)
    return int(signal.Signals["SIG" + name.upper().removeprefix("SIG")])


def _valid_id(name: str) -> bool:
    return re.fullmatch(r"[0-9]+(?:_[0-9]+)?", name) is not None


def _gpu_request(text: str) -> tuple[str | None, int]:
    found = gpu_request(text)
    if found is None:
        raise FakeSlurmError(f"sbatch: error: Invalid generic resource (gres) specification {text}")
    return found
