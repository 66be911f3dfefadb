"""Submissions a managed job cannot be, refused at submit with the reason, on
the real cluster of each release, through conf/slurm/job_submit.lua as a plain user:
an interactive allocation (salloc, srun outside an allocation: no batch script, so the
daemon could never preempt it) and --no-requeue (the daemon preempts by requeueing).
The same options without the gavel comment are left to Slurm."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slurm

MANAGED = "--comment=gavel:type=A3C"
SHORT = ("-p", "gpu", "-t", "1")


def test_interactive_jobs_with_the_option_are_refused_with_the_reason(slurm):
    slurm.cancel_all()
    for cmd in ("salloc", "srun"):
        res = slurm.as_user("nobody", cmd, MANAGED, *SHORT, "true")
        assert res.returncode != 0, (cmd, res.stdout, res.stderr)
        assert "salloc and srun jobs cannot be managed" in res.stderr, (cmd, res.stderr)
        assert "submit the work with sbatch" in res.stderr
    # nothing was queued, not even held
    queued = slurm.cmd("squeue", "-h", "-o", "%i").stdout.split()
    assert queued == [], [slurm.why(j) for j in queued]
    # without the option an interactive allocation is Slurm's own, as before
    plain = slurm.cmd("salloc", *SHORT, "true", check=False)
    assert plain.returncode == 0, plain.stderr


def test_no_requeue_is_refused_with_the_reason_not_overridden(slurm):
    slurm.cancel_all()
    res = slurm.as_user(
        "nobody", "sbatch", "--parsable", "--no-requeue", MANAGED, *SHORT,
        "-o", "/dev/null", "--wrap", "true",
    )  # fmt: skip
    assert res.returncode != 0, res.stdout  # today: accepted with Requeue=1
    assert "--no-requeue cannot be used with a gavel: job" in res.stderr, res.stderr
    assert "drop --no-requeue" in res.stderr
    # a managed job without it is held as ever; a plain --no-requeue job keeps it
    held = slurm.sbatch(MANAGED, *SHORT, "-o", "/dev/null", "--wrap", "true")
    assert slurm.show(held)["Priority"] == "0"
    plain = slurm.sbatch("--no-requeue", *SHORT, "-o", "/dev/null", "--begin=now+3600",
                         "--wrap", "true")  # fmt: skip
    assert slurm.show(plain)["Requeue"] == "0"
    slurm.cancel_all()


# Task layouts as the Lua leaves them for the daemon (backends/slurm/layout.py keeps a
# job with a task count per node on exactly the nodes it makes): the scale it writes
# into the comment (all the job's GPUs), the tasks per node it fixes ("0": none), the
# per-node request it keeps for a typed one.
# fmt: off
LAYOUTS = {
    # no -N: 4 tasks 2 a node are two nodes of gpu:2 (before: scale=2, one GPU a node)
    "tasks_per_node_gres": (("-n", "4", "--ntasks-per-node=2", "--gres=gpu:2"), "4", "2", ""),
    "tasks_per_node_gpus":
        (("-n", "4", "--ntasks-per-node=2", "--gpus=p100:4"), "4", "2", "gres:gpu:p100:2"),
    # one task of two GPUs: one node (before: spread 1+1, its srun step never started)
    "one_task_two_gpus": (("-n", "1", "--gpus-per-task=2"), "2", "1", ""),
    "one_node_two_tasks": (("-N", "1", "-n", "2", "--gpus-per-task=2"), "4", "2", ""),
    "two_nodes_four_tasks": (("-N", "2", "-n", "4", "--gpus-per-task=2"), "8", "2", ""),
    # one GPU a task: any even spread keeps each task's GPU on its node, left as it was
    "one_gpu_a_task": (("-n", "2", "--gpus-per-task=1"), "2", "0", ""),
    "rank_per_node_task_gpus":
        (("-N", "2", "--ntasks-per-node=2", "--gpus-per-task=1"), "4", "2", ""),
}
# fmt: on


def submit_as_user(slurm, *argv: str):  # type: ignore[no-untyped-def]
    return slurm.as_user("nobody", "sbatch", "--parsable", MANAGED, "-p", "gpu",
                         "-o", "/dev/null", *argv, "--wrap", "true")  # fmt: skip


@pytest.mark.parametrize("form", LAYOUTS)
def test_a_task_layout_is_kept_for_the_daemon_with_all_its_gpus(slurm, form):
    argv, scale, per_node, tres = LAYOUTS[form]
    res = submit_as_user(slurm, *argv)
    assert res.returncode == 0, res.stderr
    info = slurm.show(res.stdout.strip())
    assert info["Comment"] == f"gavel:type=A3C,scale={scale}", info["Comment"]
    assert info["NtasksPerN:B:S:C"].split(":")[0] == per_node, info["NtasksPerN:B:S:C"]
    # 22.05 prints gres:gpu:p100:2, 24.11+ gres/gpu:p100:2
    assert info.get("TresPerNode", "").replace("gres/", "gres:") == tres, info.get("TresPerNode")
    assert info["Priority"] == "0"  # held for the daemon as ever
    slurm.cancel_all()


@pytest.mark.parametrize(
    "argv,why",
    [
        # several GPUs a task over several tasks and no layout: a spread could split one
        (("-n", "2", "--gpus-per-task=2"), "--gpus-per-task=2 with 2 tasks needs a layout"),
        # tasks -N does not divide: one node would run more tasks than its GPUs serve
        (("-N", "2", "-n", "3", "--gpus-per-task=1"), "with 3 tasks on 2 nodes (-N)"),
    ],
)
def test_a_task_layout_the_daemon_cannot_keep_is_refused_with_the_fix(slurm, argv, why):
    slurm.cancel_all()
    res = submit_as_user(slurm, *argv)
    assert res.returncode != 0, res.stdout
    assert why in res.stderr and "--ntasks-per-node=K" in res.stderr, res.stderr
    assert slurm.cmd("squeue", "-h", "-o", "%i").stdout.split() == []


@pytest.mark.hostile
@pytest.mark.parametrize(
    "argv",
    [
        ("-n", "200000", "--gpus-per-task=1"),  # before: read as 1 task, scale=1
        ("-n", "200000", "--ntasks-per-node=2", "--gres=gpu:1"),  # before: scale=1
        ("-n", "5000", "--gpus-per-task=1"),
    ],
)
def test_a_huge_task_count_is_never_read_as_a_small_scale(slurm, argv):
    slurm.cancel_all()
    res = submit_as_user(slurm, *argv)
    assert res.returncode != 0, (res.stdout, [slurm.show(j)["Comment"] for j in
                                              res.stdout.split()])  # fmt: skip
    assert "must be a whole number from 1 to 1024" in res.stderr, res.stderr
