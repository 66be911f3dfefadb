"""Admin reservations and jobs of several partitions under the daemon (`slurm-gavel
run`, 4-s rounds) on each release's local cluster: one daemon run per release (module
fixture) with an admin reservation on v100-1 (Users=root, IGNORE_JOBS, active now).

* no managed job outside the reservation is ever placed on v100-1 (sampled every
  half second: the node list the daemon set, squeue's ReqNodes), and all complete;
* a job submitted with --reservation runs on v100-1 only and completes;
* a --reservation job asking more GPUs than the reservation has is given back to
  Slurm with the reason in its comment;
* a job submitted to two partitions (-p gpu,v100) runs and completes (26.05 refused
  the daemon's partition change, "Resource temporarily unavailable", round after round).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.integration.conftest import FINISHED, Scenario, new_scenario

pytestmark = pytest.mark.slurm

RESV = "gavel_admin"
NODE = "v100-1"
STEPS = 6
JOB_TYPE = "ResNet-18 (batch size 64)"


@dataclass
class Run:
    sc: Scenario
    outside: list[str] = field(default_factory=list)
    inside: str = ""
    too_big: str = ""
    two_parts: str = ""
    placed_on_node: dict[str, set[str]] = field(default_factory=dict)  # job -> ReqNodes seen
    states: dict[str, str] = field(default_factory=dict)


def submit(
    sc: Scenario, *extra: str, partition: str = "gpu", scale: int = 0, steps: int = STEPS
) -> str:
    comment = f"gavel:type={JOB_TYPE}" + (f",scale={scale}" if scale else "")
    job = sc.slurm.sbatch(
        "-p", partition, "-o", "/dev/null", f"--comment={comment}",
        *extra, str(sc.dir / "managed.sh"), str(sc.dir / "logs"), str(steps),
    )  # fmt: skip
    sc.managed[job] = JOB_TYPE
    return job


def sample(run: Run, stop: threading.Event) -> None:
    """Which nodes the daemon asked Slurm to start each job on (ReqNodes), twice a
    second while the run lasts."""
    while not stop.is_set():
        res = run.sc.slurm.cmd(
            "squeue", "-h", "-t", "pending,running", "-O", "JobID:|,ReqNodes:|", check=False
        )
        for line in res.stdout.splitlines():
            job, _, nodes = line.partition("|")
            run.placed_on_node.setdefault(job.strip(), set()).add(nodes.strip("| "))
        stop.wait(0.5)


@pytest.fixture(scope="module")
def run(slurm_session, tmp_path_factory) -> Iterator[Run]:
    slurm = slurm_session
    slurm.cancel_all()
    slurm.cmd("scontrol", "delete", f"ReservationName={RESV}", check=False)
    slurm.cmd(
        "scontrol", "create", "reservation", f"ReservationName={RESV}", f"Nodes={NODE}",
        "StartTime=now", "Duration=30", "Users=root", "Flags=IGNORE_JOBS",
    )  # fmt: skip
    sc = new_scenario(slurm, tmp_path_factory.mktemp("reservations"))
    r = Run(sc)
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(r, stop), daemon=True)
    try:
        # More v100 work than v100-2 alone holds: the round wants v100-1's GPUs too.
        r.outside = [submit(sc, "--gres=gpu:v100:1") for _ in range(6)]
        r.outside += [submit(sc, scale=2) for _ in range(4)]
        # untyped, and long enough for the rounds to share the GPU types out again while
        # it runs: it must stay on v100-1 (moved off, Slurm never starts it elsewhere)
        r.inside = submit(sc, f"--reservation={RESV}", steps=30)
        r.too_big = submit(sc, f"--reservation={RESV}", scale=8)
        r.two_parts = submit(sc, "--gres=gpu:v100:1", partition="gpu,v100")
        sampler.start()
        sc.daemon.start()
        waited = [*r.outside, r.inside, r.two_parts]
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            r.states = sc.states(waited)
            if all(s in FINISHED for s in r.states.values()):
                break
            time.sleep(1)
        r.states = sc.states(waited)
        yield r
    finally:
        stop.set()
        sc.daemon.stop()
        # The jobs go, then the reservation, then cancel_all's wait for idle nodes: a
        # reserved node never reads idle, and Slurm refuses to delete a reservation a
        # job still runs in, so cancel_all first waited out its whole 60 s.
        ids = slurm.cmd("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if ids:
            slurm.cmd("scancel", *ids, check=False)
        for _ in range(120):
            if not slurm.cmd("squeue", "-h", "-o", "%i", check=False).stdout.split():
                break
            time.sleep(0.5)
        slurm.cmd("scontrol", "delete", f"ReservationName={RESV}", check=False)
        slurm.cancel_all()


def test_no_job_outside_the_reservation_is_placed_on_its_node_and_all_complete(run):
    on_node = sorted(j for j in run.outside if NODE in ",".join(run.placed_on_node.get(j, ())))
    assert not on_node, f"placed on the reserved {NODE}: {on_node}"
    ran_there = sorted(j for j in run.outside if NODE in {s.node for s in run.sc.segments(j)})
    assert not ran_there
    run.sc.assert_all_completed({j: run.states[j] for j in run.outside})


def test_a_reservation_job_runs_inside_it_and_completes(run):
    run.sc.assert_all_completed({run.inside: run.states[run.inside]})
    assert {s.node for s in run.sc.segments(run.inside)} == {NODE}
    # never placed elsewhere (Slurm would leave it pending there: moved off, it waits)
    assert run.placed_on_node.get(run.inside, set()) <= {NODE, "", "(null)"}


def test_a_reservation_too_small_for_the_job_gives_it_back_with_why(run):
    deadline = time.monotonic() + 20
    while True:
        comment = run.sc.slurm.cmd("squeue", "-h", "-j", run.too_big, "-o", "%k").stdout
        if comment.startswith("gavel-released:") or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert comment.startswith("gavel-released: its reservation gavel_admin has 4 GPUs"), comment


def test_a_job_of_two_partitions_runs_and_completes(run):
    run.sc.assert_all_completed({run.two_parts: run.states[run.two_parts]})
