"""More forms real users submit, under the daemon (`slurm-gavel run`, 4-s rounds) on each
release's local cluster, sharing one daemon run per release (module fixture):

* one rank per node, the usual DDP layout (`-N 2 --ntasks-per-node=1 --gres=gpu:1`):
  it runs on two nodes with both its ranks (before: packed onto one node; 22.05 called
  it never runnable, 26.05 ran one rank);
* a job past its `--deadline` before the daemon could run it: never given GPUs, ended
  by Slurm as DEADLINE (before: given GPUs for a round first; held, it would wait for
  ever);
* a throttled array (`--array=0-5%2`): never more than two tasks run, each task starts
  once, no false "left squeue" warning (before: 20 start orders for 6 tasks, placed
  tasks stuck on JobArrayTaskLimit);
* task layouts without -N: `-n 4 --ntasks-per-node=2 --gres=gpu:k80:2` runs two ranks on
  each of two nodes with two GPUs each (before: one GPU a node, the Lua read one node),
  and `-n 1 --gpus-per-task=p100:2` while each p100 node has one GPU free waits for a
  node with two and runs there (before: spread 1+1, its srun step never started);
* what users see in squeue, with the user guide's command of each release: a job
  waiting for the scheduler and a job its owner holds are both `PD (JobHeldUser)`,
  told apart by the daemon's AdminComment ("waiting: ..." against "held by you") and
  the comment's `hold=user`;
* a `--dependency=singleton` chain: each link starts within a few rounds of the end
  of the one before (before: Slurm's periodic pass over held jobs' dependencies, 30 s
  and more per link; three 15-s jobs took 3 min 16 s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.integration.conftest import FINISHED, MANAGED_JOB, Scenario, Segment, new_scenario

pytestmark = pytest.mark.slurm

STEPS = 6
JOB_TYPE = "ResNet-18 (batch size 64)"
COMMENT = f"--comment=gavel:type={JOB_TYPE}"
# Each rank says where it runs (the emulated nodes share one host name: each says its
# slurmd's node) and the GPUs its node gave the job; the batch step's environment says
# its layout. A step Slurm cannot start says so in the same file.
DDP_JOB = r"""#!/bin/bash
out="$1/$SLURM_JOB_ID"
trap 'exit 99' USR1
echo "$SLURM_JOB_NUM_NODES $SLURM_NTASKS" > "$out.layout"
srun bash -c 'echo "$SLURMD_NODENAME ${SLURM_GPUS_ON_NODE:-none}"' > "$out.ranks" 2>&1 &
wait $!
sleep 3 & wait $!
"""
# managed.sh, its log named after the task (28_3) rather than the job id
ARRAY_JOB = MANAGED_JOB.replace("$SLURM_JOB_ID", "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}")
TASKS = 6
LINKS = 3


# The user guide's command ("Where is my job?"): squeue 24.11+ prints the AdminComment
# as `admin_comment` ("AdminComment" is no -O field on any release); 22.05's squeue
# has no such field, only its --json (which ignores --me and -t).
SQUEUE_FIELDS = "JobID:12,StateCompact:4,Reason:16,Comment:80,admin_comment:420"
WIDTHS = (12, 4, 16, 80)

Waiting = tuple[str, str, str, str]  # state, reason, comment, AdminComment


def waiting_in_squeue(slurm) -> dict[str, Waiting]:  # type: ignore[no-untyped-def]
    """Each of the user's pending jobs as the user guide's command shows it."""
    if slurm.release == "22.05":
        doc = json.loads(slurm.cmd("squeue", "--me", "--json").stdout)
        return {
            str(j["job_id"]): (j["job_state"], j["state_reason"], j.get("comment") or "",
                               j.get("admin_comment") or "")
            for j in doc["jobs"]
            if j["job_state"] == "PENDING" and j["user_name"] == "root"
        }  # fmt: skip
    out = slurm.cmd("squeue", "--me", "-h", "-t", "pending", "-O", SQUEUE_FIELDS).stdout
    rows: dict[str, Waiting] = {}
    for line in out.splitlines():
        cells, at = [], 0
        for w in WIDTHS:
            cells.append(line[at : at + w].strip())
            at += w
        rows[cells[0]] = ("PENDING", cells[2], cells[3], line[at:].strip())
    return rows


@dataclass
class Run:
    sc: Scenario
    ids: dict[str, str] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    seen: dict[str, set[Waiting]] = field(default_factory=dict)  # what squeue showed

    def tasks(self) -> list[str]:
        return [f"{self.ids['array']}_{t}" for t in range(TASKS)]


def sbatch(sc: Scenario, *argv: str) -> str:
    return sc.slurm.sbatch("-p", "gpu", "-o", "/dev/null", COMMENT, *argv)


@pytest.fixture(scope="module")
def run(slurm_session, tmp_path_factory) -> Iterator[Run]:
    slurm = slurm_session
    slurm.cancel_all()
    sc = new_scenario(slurm, tmp_path_factory.mktemp("forms"))
    (sc.dir / "ddp.sh").write_text(DDP_JOB)
    (sc.dir / "array.sh").write_text(ARRAY_JOB)
    r = Run(sc)
    logs = str(sc.dir / "logs")
    try:
        # no -t: 24.11+ refuse a time limit that ends after the deadline
        r.ids["deadline"] = sbatch(sc, "--deadline=now+4", str(sc.dir / "managed.sh"), logs,
                                   str(STEPS))  # fmt: skip
        r.ids["ddp"] = sbatch(sc, "-N", "2", "--ntasks-per-node=1", "--gres=gpu:1",
                              str(sc.dir / "ddp.sh"), logs)  # fmt: skip
        r.ids["array"] = sbatch(sc, f"--array=0-{TASKS - 1}%2", str(sc.dir / "array.sh"),
                                logs, str(STEPS))  # fmt: skip
        for i in range(LINKS):
            r.ids[f"link{i}"] = sbatch(sc, "-J", "gavel-chain", "--dependency=singleton",
                                       str(sc.dir / "managed.sh"), logs, "4")  # fmt: skip
        # The layouts ask a GPU type the others do not use (v100 holds them all), so
        # that their GPUs never make the fairness policy move the others.
        r.ids["tasks"] = sbatch(sc, "-n", "4", "--ntasks-per-node=2", "--gres=gpu:k80:2",
                                str(sc.dir / "ddp.sh"), logs)  # fmt: skip
        # one GPU free on each p100 node for the daemon's first rounds: the two-GPU
        # task must wait for a node with two
        for node in ("p100-1", "p100-2"):
            slurm.sbatch("-p", "gpu", "-w", node, "--gres=gpu:p100:3", "-o", "/dev/null",
                         "--wrap", "sleep 20")  # fmt: skip
        r.ids["task_gpus"] = sbatch(sc, "-n", "1", "--gpus-per-task=p100:2",
                                    str(sc.dir / "ddp.sh"), logs)  # fmt: skip
        r.ids["held"] = sbatch(sc, "--hold", str(sc.dir / "managed.sh"), logs, "4")
        time.sleep(6)  # the deadline passes while the job is held
        sc.daemon.start()
        ids = [r.ids["deadline"], r.ids["ddp"], r.ids["tasks"], r.ids["task_gpus"], *r.tasks()]
        ids += [r.ids[f"link{i}"] for i in range(LINKS)]
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            r.states = sc.states(ids)
            if all(s in FINISHED for s in r.states.values()):
                break
            for job, row in waiting_in_squeue(slurm).items():
                r.seen.setdefault(job, set()).add(row)
            time.sleep(1)
        r.states = sc.states(ids)
        yield r
    finally:
        sc.daemon.stop()
        slurm.cancel_all()


def ranks(run: Run, form: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The job's layout line and its ranks as (node, GPUs on that node)."""
    job = run.ids[form]
    assert run.states[job] == "COMPLETED", (run.states[job], run.sc.slurm.why(job))
    layout = (run.sc.dir / "logs" / f"{job}.layout").read_text().split()
    lines = (run.sc.dir / "logs" / f"{job}.ranks").read_text().splitlines()
    assert all(len(line.split()) == 2 for line in lines), lines  # no step error
    # and the daemon never placed it where Slurm found it unsatisfiable
    bad = [e for e in run.sc.daemon.events("action_failed") if e.get("job") == job]
    assert not bad, bad
    return layout, sorted((line.split()[0], line.split()[1]) for line in lines)


def test_one_rank_per_node_runs_on_two_nodes_with_both_ranks(run):
    layout, got = ranks(run, "ddp")
    assert layout == ["2", "2"], layout  # SLURM_JOB_NUM_NODES, SLURM_NTASKS
    assert len(got) == 2 and len({n for n, _ in got}) == 2, got  # one rank on each node
    assert {g for _, g in got} == {"1"}, got  # one GPU on each


def test_tasks_per_node_without_nodes_runs_on_two_nodes_with_all_its_gpus(run):
    layout, got = ranks(run, "tasks")
    assert layout == ["2", "4"], layout
    nodes = sorted({n for n, _ in got})
    assert len(nodes) == 2 and [n for n, _ in got].count(nodes[0]) == 2, got  # 2 a node
    assert {g for _, g in got} == {"2"}, got  # gpu:2 on each node, 4 in all


def test_a_task_of_two_gpus_is_never_split_over_two_nodes(run):
    layout, got = ranks(run, "task_gpus")
    assert layout == ["1", "1"], layout
    assert len(got) == 1 and got[0][0].startswith("p100-") and got[0][1] == "2", got


def test_squeue_tells_a_job_waiting_for_the_scheduler_from_a_users_hold(run):
    # the two-GPU task waited for a p100 node with two free GPUs: the scheduler's wait
    waits = run.seen.get(run.ids["task_gpus"], set())
    # (held: the AdminComment is rewritten when the decision changes, so a sample taken
    # between the daemon's release and the start still shows the wait beside Slurm's own
    # pending reason)
    ours = [
        w for w in waits
        if w[3].startswith("slurm-gavel: waiting: ") and w[:2] == ("PENDING", "JobHeldUser")
    ]  # fmt: skip
    assert ours, waits
    assert all("hold=user" not in w[2] for w in ours)
    # the owner's own hold: the same state and reason, told apart on the same line
    held = run.seen.get(run.ids["held"], set())
    release = f"held by you: scontrol release {run.ids['held']} hands it back"
    mine = [w for w in held if w[3].startswith("slurm-gavel: not scheduled: ") and release in w[3]]
    assert mine, held
    assert all(w[:2] == ("PENDING", "JobHeldUser") and "hold=user" in w[2] for w in mine)


def test_a_job_past_its_deadline_is_never_given_gpus_and_ends_as_deadline(run):
    job = run.ids["deadline"]
    assert run.states[job] == "DEADLINE", (run.states[job], run.sc.slurm.why(job))
    assert not run.sc.segments(job)  # it never ran
    orders = [j for e in run.sc.daemon.events("round") for j in e["started_jobs"].split(",")]
    assert job not in orders, orders  # nor was it ever placed
    # Where the daemon saw it first, it gave it back naming the deadline (22.05 leaves a
    # held job past its deadline waiting for ever); 26.05's slurmctld may end it first.
    given = [e for e in run.sc.daemon.events("job_given_back") if e.get("job") == job]
    assert all("--deadline" in e["reason"] for e in given), given


def test_a_throttled_array_runs_at_most_its_limit_each_task_once(run):
    tasks = run.tasks()
    states = {t: run.states[t] for t in tasks}
    assert set(states.values()) == {"COMPLETED"}, states
    segs: list[Segment] = []
    for t in tasks:
        mine = run.sc.segments(t)
        assert len(mine) == 1 and mine[0].how == "done", (t, mine)  # started once
        segs += mine
    # never more than two at once (Slurm's %2, now the daemon's too)
    edges = sorted([(s.start, 1) for s in segs] + [(s.end or 0.0, -1) for s in segs],
                   key=lambda e: (e[0], e[1]))  # fmt: skip
    running = peak = 0
    for _, d in edges:
        running += d
        peak = max(peak, running)
    assert peak == 2, peak
    # one start order per task: none placed where Slurm's throttle left it pending
    orders = [j for e in run.sc.daemon.events("round") for j in e["started_jobs"].split(",")]
    assert sorted(j for j in orders if j in tasks) == sorted(tasks), orders
    warnings = [e["warning"] for e in run.sc.daemon.events("slurm_warning")]
    assert not [w for w in warnings if "left squeue" in w], warnings


def test_a_singleton_chain_runs_without_a_minute_between_links(run):
    links = [run.ids[f"link{i}"] for i in range(LINKS)]
    assert {run.states[j] for j in links} == {"COMPLETED"}, [run.sc.slurm.why(j) for j in links]
    segs = [run.sc.segments(j) for j in links]
    assert all(len(s) == 1 and s[0].how == "done" for s in segs), segs
    gaps = [segs[i + 1][0].start - (segs[i][0].end or 0.0) for i in range(LINKS - 1)]
    # one after the other (Slurm's singleton), each within a few 4-s rounds
    assert all(0 <= g < 15 for g in gaps), gaps


def test_no_round_failed(run):
    assert not run.sc.daemon.events("round_failed")
