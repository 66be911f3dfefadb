"""The fake Slurm's time: scripts that end, checkpoint or run out of time, dependencies
and begin times, and the scheduler that starts released jobs where they fit. Driven by
FakeSlurm.advance; nothing here runs on its own."""

from __future__ import annotations

from typing import Protocol

from slurm_gavel.testing.clock import FakeClock
from slurm_gavel.testing.fakes import REQUEUE_HOLD_EXIT, Alloc, FakeJob, FakeNode

ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})


class Cluster(Protocol):
    """What the scheduler reads and changes of the fake (FakeSlurm)."""

    clock: FakeClock
    jobs: list[FakeJob]
    nodes: dict[str, FakeNode]
    partitions: dict[str, list[str]]
    def_mem_per_cpu_mb: int

    def start(self, job: FakeJob, alloc: list[Alloc]) -> None: ...

    def requeue(self, job: FakeJob, *, state: str) -> None: ...

    def end(self, job: FakeJob, state: str, *, exit_code: int | None) -> None: ...

    def forget_old(self) -> None: ...


class Scheduler:
    def __init__(self, slurm: Cluster, sched_interval_s: float) -> None:
        self.slurm = slurm
        # Slurm re-checks a held job's dependency only in its periodic pass
        # (sched_interval): a held job's "(unfulfilled)" outlives the job it waits on.
        self.sched_interval_s = sched_interval_s
        self.next_periodic = slurm.clock() + sched_interval_s

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the fake clock does not go back")
        clock = self.slurm.clock
        target = clock() + seconds
        self.run_due()
        while True:
            due = [t for t in self._event_times() if t <= target]
            if not due:
                break
            clock.set(max(clock(), min(due)))
            self.run_due()
        clock.set(target)
        self.run_due()

    def _event_times(self) -> list[float]:
        times = [self.next_periodic]
        for j in self.slurm.jobs:
            if j.state != "RUNNING":
                if j.state == "PENDING" and j.eligible_time > self.slurm.clock():
                    times.append(float(j.eligible_time))
                continue
            if j.exit_at is not None:
                times.append(j.exit_at)
            if j.time_limit_s is not None:
                times.append(j.run_started + j.time_limit_s)
        return times

    def run_due(self) -> None:
        """Everything due at the clock's time, then a scheduling pass."""
        slurm = self.slurm
        now = slurm.clock()
        for j in slurm.jobs:
            if j.state != "RUNNING":
                continue
            limit = j.run_started + j.time_limit_s if j.time_limit_s is not None else None
            if j.exit_at is not None and j.exit_at <= now and (limit is None or j.exit_at < limit):
                self._exit(j, j.exit_with)
            elif limit is not None and limit <= now:
                slurm.end(j, "TIMEOUT", exit_code=0)
        periodic = now >= self.next_periodic
        if periodic:
            while self.next_periodic <= now:
                self.next_periodic += self.sched_interval_s
        self._dependencies(periodic)
        self._schedule()
        slurm.forget_old()

    def _exit(self, job: FakeJob, code: int) -> None:
        if code == REQUEUE_HOLD_EXIT:  # RequeueExitHold
            self.slurm.requeue(job, state="SPECIAL_EXIT")
        elif code == 0:
            self.slurm.end(job, "COMPLETED", exit_code=0)
        else:
            self.slurm.end(job, "FAILED", exit_code=max(code, 0))

    def _dependencies(self, periodic: bool) -> None:
        by_name = {j.name: j for j in self.slurm.jobs}
        by_name.update((str(j.number), j) for j in self.slurm.jobs if j.task is None)
        for j in self.slurm.jobs:
            if j.state != "PENDING" or not j.dependency or (j.held and not periodic):
                continue
            left = []
            for kind, target, _ in j.dependency:
                verdict = _verdict(kind, by_name.get(target))
                if verdict == "met":
                    continue
                left.append((kind, target, verdict))
            j.dependency = left
            if not j.held:
                failed = any(s == "failed" for _, _, s in left)
                j.reason = "DependencyNeverSatisfied" if failed else j.reason

    def _schedule(self) -> None:
        slurm = self.slurm
        now = slurm.clock()
        waiting = [j for j in slurm.jobs if j.state == "PENDING" and not j.held]
        for j in sorted(waiting, key=lambda j: -j.priority):
            if j.dependency:
                if not any(s == "failed" for _, _, s in j.dependency):
                    j.reason = "Dependency"
                continue
            if j.eligible_time > now:
                j.reason = "BeginTime"
                continue
            if not j.eligible_time:  # Slurm notes when a job first became eligible
                j.eligible_time = int(now)
            alloc = self._fit(j)
            if alloc is None:
                j.reason = "Resources"
                continue
            slurm.start(j, alloc)

    def _fit(self, job: FakeJob) -> list[Alloc] | None:
        """The job's nodes and GPUs per node, first fit over its node list or its
        partition, or None when it does not fit now."""
        slurm = self.slurm
        want_type, per_node = job.gres if job.gres else (None, 0)
        if job.gres_total is not None:
            want_type = job.gres_total[0]
            per_node = -(-job.gres_total[1] // job.node_count)
        names = list(job.req_nodes) or list(slurm.partitions.get(job.partitions[0], []))
        used = self._used()
        chosen = []
        for name in names:
            node = slurm.nodes[name]
            if name in job.excluded or node.down or node.drain:
                continue
            if job.constraint and job.constraint not in node.features:
                continue
            if want_type is not None and node.gpu_type != want_type:
                continue
            gpus, cpus, mem = used.get(name, (0, 0, 0))
            if node.gpus - gpus < per_node or node.cpus - cpus < job.cpus:
                continue
            if node.memory_mb - mem < self.memory_of(job):
                continue
            chosen.append(Alloc(name, per_node))
            if len(chosen) == job.node_count:
                return chosen
        return None

    def memory_of(self, job: FakeJob) -> int:
        return job.mem_per_node_mb or job.cpus * self.slurm.def_mem_per_cpu_mb

    def _used(self) -> dict[str, tuple[int, int, int]]:
        """Per node: GPUs, CPUs and MB the running jobs hold."""
        out: dict[str, tuple[int, int, int]] = {}
        for j in self.slurm.jobs:
            for a in j.alloc:
                g, c, m = out.get(a.node, (0, 0, 0))
                out[a.node] = (g + a.gpus, c + j.cpus, m + self.memory_of(j))
        return out

    def node_use(self, node: FakeNode) -> tuple[int, int, int]:
        return self._used().get(node.name, (0, 0, 0))


def _verdict(kind: str, target: FakeJob | None) -> str:
    """met, unfulfilled or failed: a dependency on `target` as Slurm judges it now."""
    if target is None:
        return "met"  # a job Slurm forgot (past MinJobAge) counts as done
    ended = target.state in ENDED
    if kind == "after":
        return "met" if target.state != "PENDING" else "unfulfilled"
    if not ended:
        return "unfulfilled"
    ok = target.state == "COMPLETED"
    if kind == "afterany" or (kind == "afterok" and ok) or (kind == "afternotok" and not ok):
        return "met"
    return "failed"
