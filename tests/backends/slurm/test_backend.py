"""SlurmBackend against the real local cluster (tools/local-cluster, started by the
session fixture in tests/conftest.py), through the CLI transport: observe the
topology, start held managed jobs where the placement says, preempt a real
checkpointing script (USR1 -> exit 99 -> held) and resume it at its step elsewhere,
never touch a job that is not managed, batch commands per action (one per kind, the
signal beside the place, a large placement split over two scontrol).

The backend's logic that needs no real cluster (a move, the requeue-hold after the
grace, a non-blocking preemption, a released job held again, a bad placement, a
malformed comment, a drained node) runs on the fake Slurm in test_backend_on_fake.py,
pinned by the contract scenarios (tests/testing/contract_scenarios.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.commands import CommandResult, SlurmCommands
from slurm_gavel.backends.slurm.cli.transport import PLACE_SPLIT_AT, cli_backend
from slurm_gavel.backends.slurm.fields import number
from slurm_gavel.domain.cluster_model import (
    JobState,
    NodeSlice,
    NodeState,
)
from tests.backends.slurm.placements import placement

pytestmark = pytest.mark.slurm

JOB = str(Path(__file__).parents[1] / "jobs" / "checkpoint_job.sh")


class RecordingCommands(SlurmCommands):
    """The real runner, remembering every argv and stdin it was given."""

    def __init__(self, env):
        super().__init__(env)
        self.log: list[tuple[str, tuple[str, ...], str | None]] = []
        self.results: list[CommandResult] = []

    def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None) -> CommandResult:
        self.log.append((kind, tuple(argv), stdin))
        res = super().run(kind, argv, stdin=stdin, retry_timeouts=retry_timeouts, env=env)
        self.results.append(res)
        return res

    def jobs_listed(self) -> set[str]:
        """The job ids of the last squeue --json of every job (the round's job list)."""
        res = next(
            r
            for r in reversed(self.results)
            if r.argv[:2] == ("squeue", r.argv[1]) and r.argv[1].startswith("--json")
            and "-j" not in r.argv
        )  # fmt: skip
        return {str(number(j["job_id"])) for j in json.loads(res.stdout)["jobs"]}

    def mentions(self, job_id: str) -> list[str]:
        words = {job_id}
        hits = []
        for kind, argv, stdin in self.log:
            text = " ".join(argv) + " " + (stdin or "")
            tokens = set(text.replace(",", " ").replace("=", " ").split())
            if words & tokens:
                hits.append(kind)
        return hits


def backend(slurm, grace_s: float = 10.0) -> SlurmBackend:
    return cli_backend(commands=RecordingCommands(slurm.env), grace_s=grace_s, poll_s=0.2)


def managed(slurm, tmp_path: Path, name: str, job_type: str = "A3C", scale: int = 1) -> str:
    return slurm.sbatch(
        f"--comment=gavel:type={job_type},scale={scale}",
        "-p",
        "gpu",
        "-o",
        str(tmp_path / f"{name}.out"),
        JOB,
        str(tmp_path / name),
    )


def test_observe_sees_topology_and_gpu_types(slurm):
    snap = backend(slurm).observe()
    assert snap.capacity() == {"v100": 8, "p100": 8, "k80": 8}
    names = sorted(n.name for n in snap.nodes)
    assert names == ["k80-1", "k80-2", "p100-1", "p100-2", "v100-1", "v100-2"]
    assert all(n.gpus == 4 and n.state is NodeState.UP for n in snap.nodes)
    assert {n.name: n.gpu_type for n in snap.nodes}["p100-2"] == "p100"


def test_held_managed_job_is_started_on_the_chosen_type_and_node(slurm, tmp_path):
    job = managed(slurm, tmp_path, "a", "ResNet-50 (batch size 64)", scale=2)
    assert slurm.show(job)["JobState"] == "PENDING"  # held on arrival by job_submit.lua
    time.sleep(1.5)
    assert slurm.state(job) == "PENDING"  # Slurm did not start it on its own
    b = backend(slurm)
    obs = {j.job.id: j for j in b.observe().jobs}[job]
    assert obs.state is JobState.PENDING
    assert (obs.job.job_type, obs.job.scale_factor) == ("ResNet-50 (batch size 64)", 2)
    res = b.act(placement(0, {job: ("p100", [("p100-2", 2)])}))
    assert res.started == (job,) and not res.failed
    slurm.wait_state(job, "RUNNING")
    assert slurm.show(job)["NodeList"] == "p100-2"
    obs = {j.job.id: j for j in b.observe().jobs}[job]
    assert obs.state is JobState.RUNNING and obs.gpu_type == "p100"
    assert obs.nodes == (NodeSlice("p100-2", 2),)
    # The same placement next round is a lease extension: nothing issued.
    before = b.transport.commands.total
    res = b.act(placement(1, {job: ("p100", [("p100-2", 2)])}))
    assert res.kept == (job,) and b.transport.commands.total == before


def test_preempt_checkpoints_exits_99_is_held_and_resumes_elsewhere(slurm, tmp_path):
    job = managed(slurm, tmp_path, "ck", scale=2)
    b = backend(slurm)
    b.observe()
    b.act(placement(0, {job: ("v100", [("v100-1", 2)])}))
    slurm.wait_state(job, "RUNNING")
    time.sleep(1.0)  # let it take a few steps
    b.observe()
    res = b.act(placement(1, {}))
    assert res.preempted == (job,) and not res.failed
    # No start needs its GPUs gone: the act returned after the signal, no wait.
    assert b.transport.commands.counts["wait"] == 0 and b.checkpoint_waits == {}
    deadline = time.monotonic() + 30
    while (info := slurm.show(job))["JobState"] != "SPECIAL_EXIT":
        assert time.monotonic() < deadline, slurm.why(job)
        time.sleep(0.2)
    assert info["Restarts"] == "1"
    assert b.transport.commands.counts["requeuehold"] == 0  # it exited 99 by itself
    step = int((tmp_path / "ck").read_text().split()[0])
    assert step > 0
    obs = {j.job.id: j for j in b.observe().jobs}[job]
    assert obs.state is JobState.HELD and obs.restarts == 1
    # Resume on another type, spread over two nodes.
    res = b.act(placement(2, {job: ("k80", [("k80-1", 1), ("k80-2", 1)])}))
    assert res.started == (job,), res
    slurm.wait_state(job, "RUNNING")
    log = (tmp_path / "ck.log").read_text()
    for _ in range(50):
        if "restart=1" in log:
            break
        time.sleep(0.1)
        log = (tmp_path / "ck.log").read_text()
    assert f"start restart=1 step={step}" in log


def test_unmanaged_jobs_are_never_touched_and_their_gpus_excluded(slurm, tmp_path):
    other = slurm.sbatch(
        "-p", "v100", "--gres=gpu:v100:3", "-o", "/dev/null", "--wrap", "sleep 300"
    )
    stray = slurm.sbatch(
        "--comment=gavel:type=A3C",
        "-p",
        "v100",
        "--gres=gpu:v100:1",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 300",
    )  # managed (held)
    slurm.wait_state(other, "RUNNING")
    b = backend(slurm)
    snap = b.observe()
    v1 = next(n for n in snap.nodes if n.name == "v100-1")
    assert v1.gpus_held_unmanaged == 3 and v1.usable_gpus == 1
    assert other not in {j.job.id for j in snap.jobs}
    # A placement naming the unmanaged job is refused; preempt-all leaves it alone.
    res = b.act(placement(0, {other: ("v100", [("v100-1", 1)]), stray: ("v100", [("v100-1", 1)])}))
    assert dict(res.failed)[other].startswith("not a managed job")
    assert res.started == (stray,)
    slurm.wait_state(stray, "RUNNING")
    b.observe()
    b.act(placement(1, {}))
    assert slurm.state(other) == "RUNNING"
    assert b.transport.commands.mentions(other) == []


def test_commands_are_batched_one_per_action_kind(slurm, tmp_path):
    jobs = [managed(slurm, tmp_path, f"b{i}") for i in range(6)]
    b = backend(slurm)
    b.observe()
    nodes = ["v100-1", "v100-2", "p100-1", "p100-2", "k80-1", "k80-2"]
    plan = {j: (n.split("-")[0], [(n, 1)]) for j, n in zip(jobs, nodes, strict=True)}
    res = b.act(placement(0, plan))
    assert sorted(res.started) == sorted(jobs)
    counts = dict(b.transport.commands.counts)
    assert counts.pop("detect") <= 2  # once per backend: `sinfo -V` (+ `squeue --json=list`)
    # observe: the nodes, the reservations, the jobs' JSON (no accounting: "(null)"
    # accounts); list: the listing (22.05: and its second, for --exclude and user names)
    lists = 2 if slurm.release == "22.05" else 1
    assert counts == {"observe": 3, "list": lists, "place": 1, "release": 1}
    for j in jobs:
        slurm.wait_state(j, "RUNNING")
    b.observe()
    before = dict(b.transport.commands.counts)
    res = b.act(placement(1, {}))
    assert sorted(res.preempted) == sorted(jobs)
    assert b.transport.commands.counts["signal"] - before.get("signal", 0) == 1


def test_a_managed_job_that_ends_between_rounds_is_reported_with_its_outcome(slurm, tmp_path):
    """24.11+ squeue lists no finished job unless asked: the backend asks for the
    final record of a managed job that left the list (22.05 lists it anyway)."""
    ok = slurm.sbatch(
        "--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", JOB, str(tmp_path / "ok"), "3"
    )
    bad = slurm.sbatch(
        "--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", "--wrap", "exit 3"
    )
    b = backend(slurm)
    b.observe()
    res = b.act(placement(0, {ok: ("v100", [("v100-1", 1)]), bad: ("k80", [("k80-1", 1)])}))
    assert sorted(res.started) == sorted([ok, bad])
    slurm.wait_state(ok, "COMPLETED")
    slurm.wait_state(bad, "FAILED")
    snap = b.observe()
    done = {j.job.id: j for j in snap.jobs if j.state is JobState.DONE}
    assert done[ok].succeeded and not done[bad].succeeded
    assert not any("MinJobAge" in w for w in b.warnings), b.warnings
    assert b.transport.commands.counts["ended"] == (1 if b.transport.cli_format.filters_work else 0)


def test_the_jobs_read_per_round_do_not_grow_with_finished_jobs(slurm):
    b = backend(slurm)
    b.transport.reader.listed.full_every = (
        1  # every job's JSON each round (as the safety net reads it)
    )
    b.observe()  # the first lists finished jobs too (those of earlier tests)
    b.observe()
    before = b.transport.commands.jobs_listed()
    finished = [slurm.sbatch("-p", "k80", "-o", "/dev/null", "--wrap", "true") for _ in range(5)]
    for job in finished:
        slurm.wait_state(job, "COMPLETED")
    b.observe()
    listed = b.transport.commands.jobs_listed()
    if b.transport.cli_format.filters_work:
        assert listed == before
    else:  # 22.05's squeue --json ignores -t: every job slurmctld holds (MinJobAge)
        assert listed == before | set(finished)


def test_a_round_issues_at_most_one_command_per_kind_whatever_the_jobs(slurm, tmp_path):
    """Observe (3), then per action kind at most one command (signal, place,
    release; requeuehold not due): the count does not depend on the number of jobs."""
    jobs = [managed(slurm, tmp_path, f"n{i}") for i in range(8)]
    nodes = ["v100-1", "v100-2", "p100-1", "p100-2"]
    first = {j: (n.split("-")[0], [(n, 1)]) for j, n in zip(jobs[:4], nodes, strict=True)}
    b = cli_backend(commands=RecordingCommands(slurm.env), grace_s=60.0, wait_for_preempted=False)
    b.observe()
    assert sorted(b.act(placement(0, first)).started) == sorted(jobs[:4])
    for j in jobs[:4]:
        slurm.wait_state(j, "RUNNING")
    before = dict(b.transport.commands.counts)
    b.observe()
    # keep 2, preempt 2, start 4 others (on the k80s and next to the kept ones)
    second = {
        **{j: first[j] for j in jobs[:2]},
        jobs[4]: ("k80", [("k80-1", 1)]),
        jobs[5]: ("k80", [("k80-2", 1)]),
        jobs[6]: ("v100", [("v100-1", 1)]),
        jobs[7]: ("v100", [("v100-2", 1)]),
    }
    res = b.act(placement(1, second))
    assert sorted(res.started) == sorted(jobs[4:]) and sorted(res.preempted) == sorted(jobs[2:4])
    assert sorted(res.kept) == sorted(jobs[:2])
    round_counts = {k: v - before.get(k, 0) for k, v in b.transport.commands.counts.items()}
    round_counts = {k: v for k, v in round_counts.items() if v}
    # the listing (22.05: and its second), the nodes' JSON and the reservations: the 4
    # jobs that started since are built from their listing text
    # (slurm/cli/jobs_from_text.py), so no job's JSON is read
    lists = 2 if slurm.release == "22.05" else 1
    assert round_counts == {"list": lists, "observe": 2, "signal": 1, "place": 1, "release": 1}


class SignalWaitsForPlace(RecordingCommands):
    """The signal command holds back until the place command has begun: an act that
    issued them one after the other would make the signal wait out its timeout."""

    def __init__(self, env):
        super().__init__(env)
        self.place_began = threading.Event()
        self.signal_saw_place: bool | None = None

    def run(self, kind, argv, *, stdin=None, retry_timeouts=False, env=None) -> CommandResult:
        if kind == "place":
            self.place_began.set()
        if kind == "signal":
            self.signal_saw_place = self.place_began.wait(timeout=20)
        return super().run(kind, argv, stdin=stdin, retry_timeouts=retry_timeouts, env=env)


def test_the_signal_goes_out_beside_the_place_and_both_take_effect(slurm, tmp_path):
    """A rotation: one job preempted, another placed on its GPU, in one act. The
    signal runs beside the place and release (design.md, act step 1), and each still
    does what it did in sequence: the preempted job checkpoints and is requeue-held,
    the placed one starts on that GPU once it is free, and a signal that cannot
    reach its job (ended since the observe) is still that job's failure."""
    old, new = (managed(slurm, tmp_path, n, scale=4) for n in ("rot-old", "rot-new"))
    gone = managed(slurm, tmp_path, "rot-gone")
    cmds = SignalWaitsForPlace(slurm.env)
    b = cli_backend(commands=cmds, grace_s=30.0, poll_s=0.2, wait_for_preempted=False)
    b.observe()
    b.act(placement(0, {old: ("k80", [("k80-2", 4)]), gone: ("p100", [("p100-2", 1)])}))
    slurm.wait_state(old, "RUNNING")
    slurm.wait_state(gone, "RUNNING")
    b.observe()
    slurm.cmd("scancel", gone)  # ends between this observe and the act's signal
    slurm.wait_state(gone, "CANCELLED", "GONE")
    cmds.place_began.clear()  # (round 0 placed jobs)
    res = b.act(placement(1, {new: ("k80", [("k80-2", 4)])}))
    assert cmds.signal_saw_place is True  # the signal did not wait for the place to end
    assert res.started == (new,) and res.preempted == (old,)
    assert dict(res.failed).keys() == {gone}
    slurm.wait_state(old, "SPECIAL_EXIT", timeout=40)  # checkpointed, exit 99, held
    slurm.wait_state(new, "RUNNING", timeout=40)
    assert slurm.show(new)["NodeList"] == "k80-2"


def test_a_large_placement_is_split_over_two_scontrol_with_errors_kept_per_job(slurm, tmp_path):
    """From PLACE_SPLIT_AT jobs an act places them through two scontrol side by side
    (half the update lines each): every job gets its own node, and a job one stream
    cannot place (cancelled since the observe) fails alone, in either stream."""
    n = PLACE_SPLIT_AT + 6
    argv = ("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null", "--wrap", "sleep 300")
    jobs = [slurm.sbatch(*argv) for _ in range(n)]
    nodes = ["v100-1", "v100-2", "p100-1", "p100-2", "k80-1", "k80-2"]
    plan = {j: (nodes[i % 6].split("-")[0], [(nodes[i % 6], 1)]) for i, j in enumerate(jobs)}
    b = backend(slurm)
    b.observe()
    cancelled = {jobs[0], jobs[1]}  # the first line of each stream (orders[i::2])
    for j in cancelled:
        slurm.cmd("scancel", j)
        slurm.wait_state(j, "CANCELLED", "GONE")
    before = b.transport.commands.counts["place"]
    res = b.act(placement(0, plan))
    assert b.transport.commands.counts["place"] - before == 2
    assert dict(res.failed).keys() == cancelled
    assert sorted(res.started) == sorted(set(jobs) - cancelled)
    listed = slurm.cmd("squeue", "-h", "-j", ",".join(res.started), "-o", "%i %n").stdout
    asked = dict(line.split() for line in listed.splitlines())
    assert asked == {j: plan[j][1][0][0] for j in res.started}
