"""Moldable at (re)start on Slurm: a held job is released at the GPU count
and node count its placement gives, whatever it asked before, on the real cluster of
each release. The act's update (NumNodes=N-N NodeList=... Gres=gpu:K, or slurmrestd's
nodes/tres_per_node) is what carries a count chosen by the round: started on 1 GPU,
preempted, resumed on 2 nodes x 2 GPUs, preempted, resumed on 1 GPU again, each run
seeing its own count (SLURM_JOB_NUM_NODES, SLURM_GPUS_ON_NODE) and going on from the step
the last one saved on the checkpoint signal. Both transports: the
commands (scontrol update) and slurmrestd (its job update; on 22.05's v0.0.38 gres and
nodes [min, max], the node list pinned with scontrol: rest/transport.py)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.cli import main
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm


def on(round_index: int, job: str | None, slices: tuple[NodeSlice, ...]) -> RoundPlacement:
    jobs = {} if job is None else {job: JobPlacement(job, "v100", slices)}
    return RoundPlacement(round_index, time.time(), jobs)


def runs(out: Path) -> list[str]:
    return (
        [ln for ln in out.read_text().splitlines() if ln.startswith("run")] if out.exists() else []
    )


def wait_runs(out: Path, n: int, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(runs(out)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    return runs(out)


@pytest.mark.parametrize("transport", ["cli", "rest"])
def test_a_job_resumes_at_another_gpu_and_node_count(slurm, tmp_path, transport):
    out = tmp_path / "runs.log"
    ckpt = tmp_path / "step"
    script = tmp_path / "job.sh"
    script.write_text(  # counts steps, saves the count on the checkpoint signal, exits 99
        "#!/bin/bash\n"
        f"step=0; [[ -f {ckpt} ]] && step=$(cat {ckpt})\n"
        f"echo run nodes=$SLURM_JOB_NUM_NODES gpus_per_node=$SLURM_GPUS_ON_NODE >> {out}\n"
        f"echo $step >> {out}.from\n"
        f"trap 'echo $step > {ckpt}; exit 99' USR1\n"
        "while true; do step=$((step + 1)); sleep 0.2 & wait $!; done\n"
    )
    job = slurm.sbatch("--comment=gavel:type=A3C,scale=1-4", "-p", "gpu", "--gres=gpu:1",
                       "-o", "/dev/null", str(script))  # fmt: skip
    options = {"grace_s": 1.0, "poll_s": 0.2, "fresh_run_s": 0.0}
    if transport == "rest":
        cluster = rest_backend(rest_up(slurm.run_dir), env=slurm.env, **options)
    else:
        cluster = cli_backend(env=slurm.env, **options)
    seen = {o.job.id: o.job for o in cluster.observe().jobs}[job]
    assert (seen.scale_factor, seen.scale_range) == (1, (1, 4))  # the round molds it

    def act(i: int, slices: tuple[NodeSlice, ...] | None) -> None:
        cluster.observe()
        res = cluster.act(on(i, job if slices else None, slices or ()))
        assert not res.failed, res

    def preempt(i: int) -> None:
        act(i, None)
        time.sleep(1.5)  # past the grace: the next act requeue-holds it if it still runs
        act(i + 1, None)
        # it saved its step and exited 99 (RequeueExitHold: SPECIAL_EXIT, held)
        slurm.wait_state(job, "PENDING", "SPECIAL_EXIT")

    act(0, (NodeSlice("v100-1", 1),))
    assert wait_runs(out, 1) == ["run nodes=1 gpus_per_node=1"], slurm.why(job)
    preempt(1)
    # resumed on two nodes, two GPUs each: 4 GPUs where it asked for 1
    act(3, (NodeSlice("v100-1", 2), NodeSlice("v100-2", 2)))
    slurm.wait_state(job, "RUNNING")
    info = slurm.show(job)
    assert info["NumNodes"] == "2" and info["NodeList"] == "v100-[1-2]", info
    assert "gpu:2" in info.get("TresPerNode", info.get("Gres", "")), info
    got = wait_runs(out, 2)
    assert got[1] == "run nodes=2 gpus_per_node=2", got
    preempt(4)
    act(6, (NodeSlice("v100-2", 1),))  # and back to one GPU on one node
    slurm.wait_state(job, "RUNNING")
    info = slurm.show(job)
    assert info["NumNodes"] == "1" and info["NodeList"] == "v100-2", info
    assert wait_runs(out, 3)[2] == "run nodes=1 gpus_per_node=1", runs(out)
    assert int(info["Restarts"]) == 2
    # its progress went on across the counts: each run started where the last one saved
    starts = [int(x) for x in Path(f"{out}.from").read_text().split()]
    assert len(starts) == 3 and 0 == starts[0] < starts[1] < starts[2], starts
    if transport == "rest":  # the three starts were slurmrestd's job updates
        assert cluster.transport.rest.counts["place"] == 3, cluster.transport.rest.counts


@pytest.mark.parametrize("joint", [False, True], ids=["least-first", "moldable_lp"])
def test_the_round_chooses_the_count_and_slurm_starts_the_job_at_it(slurm, tmp_path, joint):
    """The whole path on Slurm: the comment's range, the round's count choice (idle
    GPUs: it grows past the 1 GPU it asked for; by least-first + growth, or by the
    joint LP over type and count), the policy, the mechanism and the act."""
    slurm.cancel_all()  # alone on the cluster: an earlier test's jobs would share the round
    out = tmp_path / "runs.log"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"echo run nodes=$SLURM_JOB_NUM_NODES gpus_per_node=$SLURM_GPUS_ON_NODE >> {out}\n"
        "while true; do sleep 0.2 & wait $!; done\n"
    )
    job = slurm.sbatch("--comment=gavel:type=ResNet-18 (batch size 16),scale=1-4", "-p", "gpu",
                       "--gres=gpu:1", "-o", "/dev/null", str(script))  # fmt: skip
    cluster = cli_backend(env=slurm.env)
    molds = replace(DAEMON_PLUGINS.moldable_counts, lp=joint)
    plugins = replace(DAEMON_PLUGINS, moldable_counts=molds)
    config = SchedulerConfig(table=load_table(), policy="max_min_fairness", plugins=plugins)
    state, report = run_round(SchedulerState(), cluster, config)
    assert report.placement.jobs[job].gpus == 4, report  # the table's best count that fits
    assert not report.result.failed, report.result
    slurm.wait_state(job, "RUNNING")
    info = slurm.show(job)
    assert info["NumNodes"] == "1" and "gpu:4" in info.get("TresPerNode", ""), info
    assert wait_runs(out, 1) == ["run nodes=1 gpus_per_node=4"], slurm.why(job)
    _, again = run_round(state, cluster, config)  # kept at its count while it runs
    assert again.result.kept == (job,), again.result


def test_status_and_explain_name_the_count_slurm_started_it_at(slurm, tmp_path, capsys):
    """The daemon on the real cluster: a moldable job alone is placed at 4 GPUs (its
    range's maximum, the table's best count that fits), `status` and `explain` say so
    and why, and once it runs there its count is that of its run."""
    state = tmp_path / "state"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\ntrap 'exit 99' USR1\nwhile true; do sleep 0.2 & wait $!; done\n"
    )
    job = slurm.sbatch("--comment=gavel:type=ResNet-18 (batch size 16),scale=1-4", "-p", "gpu",
                       "--gres=gpu:1", "-o", "/dev/null", str(script))  # fmt: skip
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 5, "state_dir": str(state),
                        "checkpoint": {"grace_seconds": 3}})  # fmt: skip
    daemon = Daemon(cfg, cli_backend(env=slurm.env), metrics=DaemonMetrics())
    try:
        daemon.start()
        daemon.round()
        assert main(["status", "--state-dir", str(state), "--json"]) == 0
        m = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}[job]["moldable"]
        assert (m["range"], m["count"], m["run"], m["chosen"]) == ([1, 4], 4, "this", "grown")
        assert m["limit"] is None and 4 in [c["gpus"] for c in m["counts"]]
        assert main(["explain", job, "--state-dir", str(state)]) == 0
        text = capsys.readouterr().out
        assert "on 4 (1-4) GPU(s)" in text
        assert "moldable, range 1-4 GPUs; this run has 4: grown from 1 into GPUs" in text
        slurm.wait_state(job, "RUNNING")
        assert "gpu:4" in slurm.show(job).get("TresPerNode", ""), slurm.show(job)
        daemon.round()
        assert main(["status", "--state-dir", str(state)]) == 0
        out = capsys.readouterr().out
        assert f"  {job}: range 1-4 GPUs; this run has 4: the count of this run" in out, out
    finally:
        daemon.store.release()
        slurm.cmd("scancel", job, check=False)


def test_the_daemon_resumes_a_preempted_job_at_another_count(slurm, tmp_path, capsys):
    """Moldable, live: on the k80 partition (2 nodes x 4 GPUs) a moldable job alone grows
    to all 8 GPUs; a rigid 8-GPU job arrives, max_min_fairness shares the time, the
    moldable job is preempted (it saves its step, exits 99) and resumed by a later
    round at 1 GPU (its least count: the other job holds the rest), going on from its
    step. status names both counts."""
    out, ckpt = tmp_path / "runs.log", tmp_path / "step"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"step=0; [[ -f {ckpt} ]] && step=$(cat {ckpt})\n"
        f"echo run $((SLURM_JOB_NUM_NODES * SLURM_GPUS_ON_NODE)) $step >> {out}\n"
        f"trap 'echo $step > {ckpt}; exit 99' USR1\n"
        "while true; do step=$((step + 1)); sleep 0.2 & wait $!; done\n"
    )
    rigid = tmp_path / "rigid.sh"
    rigid.write_text("#!/bin/bash\ntrap 'exit 99' USR1\nwhile true; do sleep 0.2 & wait $!; done\n")
    r18 = "ResNet-18 (batch size 16)"
    job = slurm.sbatch(f"--comment=gavel:type={r18},scale=1-8", "-p", "k80", "--gres=gpu:1",
                       "-o", "/dev/null", str(script))  # fmt: skip
    state = tmp_path / "state"
    cfg = parse_config({"partitions": ["k80"], "round_seconds": 5, "state_dir": str(state),
                        "policy": "max_min_fairness",
                        "checkpoint": {"grace_seconds": 3}})  # fmt: skip
    daemon = Daemon(cfg, cli_backend(env=slurm.env, managed_partitions=["k80"]),
                    metrics=DaemonMetrics())  # fmt: skip
    other = None

    def counts() -> list[tuple[int, int]]:
        lines = out.read_text().splitlines() if out.exists() else []
        return [(int(a), int(b)) for _, a, b in (ln.split() for ln in lines)]

    try:
        daemon.start()
        daemon.round()
        slurm.wait_state(job, "RUNNING")
        deadline = time.monotonic() + 30
        while not counts() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert counts() == [(8, 0)], (counts(), slurm.why(job))
        time.sleep(2)  # some steps
        other = slurm.sbatch(f"--comment=gavel:type={r18},scale=8", "-p", "k80", "-N", "2",
                             "--gres=gpu:4", "-o", "/dev/null", str(rigid))  # fmt: skip
        views, lines = [], []  # what status showed of it after each round
        deadline = time.monotonic() + 120
        while len(counts()) < 2 and time.monotonic() < deadline:
            time.sleep(1.5)
            daemon.round()
            assert main(["status", "--state-dir", str(state), "--json"]) == 0
            j = {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}[job]
            m = j["moldable"]
            views.append((j["state"], m["count"], m["run"], m["last_count"]))
            assert main(["status", "--state-dir", str(state)]) == 0
            lines += capsys.readouterr().out.splitlines()
        runs = counts()
        assert len(runs) >= 2, (runs, slurm.why(job), slurm.why(other))
        assert runs[1][0] < 8 and runs[1][1] > 0, runs  # another count, from its saved step
        # the round that restarted it: this run's count and its last run's
        assert ("starting", runs[1][0], "this", 8) in views, views
        assert any(
            ln.startswith(f"  {job}: range 1-8 GPUs; this run has {runs[1][0]} (its last run "
                          "had 8): the least count of its range")
            for ln in lines
        ), lines  # fmt: skip
    finally:
        daemon.store.release()
        slurm.cmd("scancel", job, *([other] if other else []), check=False)
