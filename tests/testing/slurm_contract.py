"""The contract between the fake Slurm (slurm_gavel.testing) and real Slurm: scenarios
that submit jobs and issue the transport's commands, each run on a Harness, returning
what was observed after each step (Step: the jobs and nodes as the transport reads
them, projected onto what the fake models, and each command's per-job failures).

test_contract.py runs every scenario on the fake (no Slurm: the quick tier);
test_contract_on_slurm.py runs it on the real local cluster of each release through
the CLI transport and on the fake, and fails on the first step whose observations
differ. CONTRIBUTING.md, "Testing against the fake", lists which scenario pins which
behaviour.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from slurm_gavel.backends.slurm.arrays import expand_tasks
from slurm_gavel.backends.slurm.records import SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.transport import SlurmTransport
from slurm_gavel.domain.comment_grammar import is_managed_comment
from slurm_gavel.domain.model import JobId
from slurm_gavel.testing import FakeSlurm, FakeTransport, OnSignal, OwnerError, Script

# What a step observed: {"jobs": {name: {...}}, "nodes": {name: {...}}, "failed": {...}}
Observation = dict[str, Any]


@dataclass(frozen=True)
class Submit:
    """One sbatch of a scenario: name is the scenario's own (ids differ per cluster)."""

    name: str
    comment: str = ""
    partition: str = "gpu"
    gres: str | None = None
    array: range | None = None
    after: tuple[str, str] | None = None  # (kind, job name): --dependency
    begin_in_s: int | None = None
    script: Script = field(default_factory=Script)
    owner: bool = False  # submitted by a plain user (OWNER), who may then run owns()


class Harness(Protocol):
    """A cluster the scenarios run on: the fake, or a real release."""

    transport: SlurmTransport
    ids: dict[str, JobId]  # scenario name -> this cluster's job id

    def submit(self, job: Submit) -> JobId: ...

    def wait(self, seconds: float) -> None:
        """Let time pass (real: sleep; fake: advance its clock)."""
        ...

    def now(self) -> float: ...

    def drain(self, node: str, drained: bool) -> None:
        """`scontrol update NodeName=NODE State=DRAIN` (or State=RESUME: False)."""
        ...

    def owns(self, verb: str, name: str) -> bool:
        """`scontrol VERB JOB` (hold, release, requeuehold) run by the job's owner (a
        plain user, through job_submit.lua where Slurm calls it): whether it succeeded."""
        ...


# The plain user a scenario's owner jobs belong to (the real cluster runs its commands
# as this user with runuser, or through the chroot's wrapper).
OWNER = "nobody"


# --- the projection: what the fake models, in words the two clusters share ----------


def job_view(sj: SlurmJob, names: dict[JobId, str], now: float) -> dict[str, Any]:
    """A job record without what differs by cluster and is not modelled (its ids,
    times, user, priority value): state, hold, request, placement, restarts."""
    eligible = sj.eligible_time
    # A batch script killed by a signal: its reason reads JobLaunchFailure on 22.05 and
    # RaisedSignal on 24.11 and 26.05; nothing reads it (run_ends.py reads exit_signal)
    reason = "(killed by a signal)" if sj.exit_signal is not None else sj.reason
    return {
        "state": sj.state,
        "reason": reason,
        "held": sj.priority == 0,
        "comment": sj.comment,
        "partitions": sj.partitions,
        "nodes": sj.nodes,
        "gpu_request": sj.gpu_request,
        "gpu_request_total": sj.gpu_request_total,
        "slices": tuple((s.node, s.gpu_type, s.gpus) for s in sj.gpu_slices),
        "node_count": sj.node_count,
        "restarts": sj.restarts,
        "exit_code": sj.exit_code,
        "exit_signal": sj.exit_signal,
        "dependency": _renamed(sj.dependency, names),
        # 0, or in the future (a --begin; a requeue's 121 s), or now or past
        "eligible": "unset" if not eligible else ("later" if eligible > now + 30 else "now"),
        # (MB, CPUs) a managed job needs on a node with one GPU: what the backend checks
        # (fit.py). Not which field holds it: the CLI's listing text (24.11+) says the
        # memory per node where the JSON says it per CPU, the same figure. Nothing reads
        # a plain job's (cli/jobs_from_text.py leaves them out).
        "needs": sj.needs.on_node(1) if is_managed_comment(sj.comment) else None,
    }


def node_view(n: SlurmNode) -> dict[str, Any]:
    return {
        "state": n.state,
        "flags": sorted(n.flags),
        "gpu_type": n.gpu_type,
        "gpus": n.gpus,
        "gpus_used": n.gpus_used,
        "partitions": n.partitions,
        "features": sorted(n.features),
        "memory_mb": n.memory_mb,
        "memory_used_mb": n.memory_used_mb,
        "cpus": n.cpus,
        "cpus_used": n.cpus_used,
    }


def _renamed(text: str, names: dict[JobId, str]) -> str:
    return re.sub(r"[0-9]+(?:_[0-9]+)?", lambda m: names.get(m.group(0), "?" + m.group(0)), text)


def observe(h: Harness, failed: dict[JobId, str] | None = None) -> Observation:
    """The scenario's jobs (by name; an array's tasks as NAME_TASK) and every node, as
    the backend reads them: the listing, then the ended records of those not in it."""
    t = h.transport
    nodes = t.read_nodes()
    # Every scenario job watched: on 22.05 one that left the listing makes the first
    # observe read every job's JSON, the finished ones too (its JSON ignores -j).
    jobs = expand_tasks(t.read_jobs(nodes, first=True, watched=list(h.ids.values())))
    names = _names(h)
    ours = [j for j in jobs if j.job_id in names or j.job_id.split("_")[0] in names]
    seen = {j.job_id for j in ours}
    missing = [i for i in h.ids.values() if i not in seen and not _array_seen(i, seen)]
    if missing:
        ours += [j for j in expand_tasks(t.read_ended(missing)) if j.job_id not in seen]
    now = h.now()
    return {
        "jobs": {_name(j.job_id, names): job_view(j, names, now) for j in ours},
        "nodes": {n.name: node_view(n) for n in nodes},
        "failed": sorted(_name(j, names) for j in (failed or {})),
    }


def _names(h: Harness) -> dict[JobId, str]:
    return {v: k for k, v in h.ids.items()}


def _name(job_id: JobId, names: dict[JobId, str]) -> str:
    base, _, task = job_id.partition("_")
    return names.get(job_id) or (f"{names.get(base, '?' + base)}_{task}" if task else "?" + base)


def _array_seen(job_id: JobId, seen: set[JobId]) -> bool:
    return any(s.startswith(job_id + "_") for s in seen)


def settle(
    h: Harness, until: Callable[[Observation], bool], timeout_s: float = 30.0, step_s: float = 0.5
) -> Observation:
    """Observe until `until` holds (or the timeout: the last observation, for the test to
    show): real Slurm acts in its own time, the fake when its clock moves."""
    deadline = h.now() + timeout_s
    obs = observe(h)
    while not until(obs) and h.now() < deadline:
        h.wait(step_s)
        obs = observe(h)
    # Slurm updates a node's use a moment after the job's state: wait until what is
    # read no longer changes (the fake's is at once)
    for _ in range(10):
        h.wait(step_s)
        again = observe(h)
        if again == obs:
            break
        obs = again
    return obs


def state_of(name: str) -> Callable[[Observation], str | None]:
    return lambda obs: obs["jobs"].get(name, {}).get("state")


def differences(fake: dict[str, Any], real: dict[str, Any]) -> list[str]:
    """Each field that differs, as `jobs.NAME.FIELD: fake X, Slurm Y`."""
    out = []
    for part in ("jobs", "nodes"):
        for name in sorted(set(fake[part]) | set(real[part])):
            f, r = fake[part].get(name), real[part].get(name)
            if f is None or r is None:
                out.append(f"{part}.{name}: fake {f}, Slurm {r}")
                continue
            out += [
                f"{part}.{name}.{k}: fake {f.get(k)!r}, Slurm {r.get(k)!r}"
                for k in sorted(set(f) | set(r))
                if f.get(k) != r.get(k)
            ]
    if fake.get("round") != real.get("round"):  # what SlurmBackend's observe and act said
        out.append(f"round: fake {fake.get('round')}, Slurm {real.get('round')}")
    if fake.get("owner") != real.get("owner"):  # which of the owner's commands succeeded
        out.append(f"owner: fake {fake.get('owner')}, Slurm {real.get('owner')}")
    if fake["failed"] != real["failed"]:
        out.append(f"failed: fake {fake['failed']}, Slurm {real['failed']}")
    return out


# --- the fake's harness ------------------------------------------------------------------


class FakeHarness:
    def __init__(self, slurm: FakeSlurm | None = None) -> None:
        self.slurm = slurm or FakeSlurm()
        self.transport = FakeTransport(self.slurm, wait_advance_s=0.0)
        self.ids: dict[str, JobId] = {}

    def submit(self, job: Submit) -> JobId:
        after = job.after
        job_id = self.slurm.submit(
            job.comment,
            partition=job.partition,
            gres=job.gres,
            array=job.array,
            dependency=f"{after[0]}:{self.ids[after[1]]}" if after else "",
            begin=self.now() + job.begin_in_s if job.begin_in_s is not None else None,
            script=job.script,
            user=OWNER if job.owner else "root",
            user_id=65534 if job.owner else 0,
        )
        self.ids[job.name] = job_id
        # sbatch returns before slurmctld's next pass; the real harness waits that out
        self.slurm.advance(1.0)
        return job_id

    def wait(self, seconds: float) -> None:
        self.slurm.advance(seconds)

    def now(self) -> float:
        return self.slurm.clock()

    def drain(self, node: str, drained: bool) -> None:
        if drained:
            self.slurm.drain(node, "contract")
        else:
            self.slurm.resume(node)

    def owns(self, verb: str, name: str) -> bool:
        command = {
            "hold": self.slurm.owner.hold,
            "release": self.slurm.owner.release,
            "requeuehold": self.slurm.owner.requeuehold,
        }[verb]
        try:
            command(self.ids.get(name, name))
        except OwnerError:
            return False
        return True


def wrap(script: Script) -> str:
    """The --wrap text of a real job that behaves as the fake's Script."""
    trap = {
        OnSignal.CHECKPOINT: "trap 'exit 99' USR1; ",
        OnSignal.IGNORE: "trap '' USR1; ",
        OnSignal.DIE: "",
    }[script.on_signal]
    runs = 3600 if script.runs_s is None else script.runs_s
    return f"{trap}sleep {runs:g} & wait $!; exit {script.exit_code}"


class RealHarness:
    """A real release's local cluster (tests/conftest.py's LocalSlurm) through the CLI
    transport, the one the daemon uses by default."""

    def __init__(self, slurm: Any) -> None:
        from slurm_gavel.backends.slurm.cli.transport import cli_backend

        self.cluster = slurm
        self.transport = cli_backend(env=slurm.env).transport
        self.ids: dict[str, JobId] = {}

    def submit(self, job: Submit) -> JobId:
        args = ["-p", job.partition, "-o", "/dev/null"]
        if job.comment:
            args.append(f"--comment={job.comment}")
        if job.gres:
            args.append(f"--gres={job.gres}")
        if job.array is not None:
            args.append(f"--array={job.array.start}-{job.array.stop - 1}")
        if job.after:
            args.append(f"--dependency={job.after[0]}:{self.ids[job.after[1]]}")
        if job.begin_in_s is not None:
            args.append(f"--begin=now+{job.begin_in_s}")
        if job.owner:
            res = self.cluster.as_user(OWNER, "sbatch", "--parsable", "-D", "/tmp", *args,
                                       "--wrap", wrap(job.script))  # fmt: skip
            assert res.returncode == 0, res.stderr
            job_id = str(res.stdout.strip().split(";")[0])
        else:
            job_id = self.cluster.sbatch(*args, "--wrap", wrap(job.script))
        self.ids[job.name] = job_id
        time.sleep(1.0)
        return job_id

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def now(self) -> float:
        return time.time()

    def drain(self, node: str, drained: bool) -> None:
        state = ("State=DRAIN", "Reason=contract") if drained else ("State=RESUME",)
        self.cluster.cmd("scontrol", "update", f"NodeName={node}", *state)

    def owns(self, verb: str, name: str) -> bool:
        res = self.cluster.as_user(OWNER, "scontrol", verb, self.ids.get(name, name))
        return res.returncode == 0
