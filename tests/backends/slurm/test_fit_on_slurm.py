"""Constraints, GPU types and memory bind, on the real cluster of each
release (CR_Core_Memory, DefMemPerCPU, node features = GPU types): a typed --gres or
--gpus keeps its type through job_submit.lua and is never placed on another type, and
placed with its own type it runs; --constraint and --exclude keep a job to the nodes
they name; a node whose memory a plain job took is not free for a managed one;
--mem-per-gpu and --cpus-per-gpu are accepted and kept; --nodelist is refused with a
reason. Today's main dropped the type at submit, placed --constraint=p100 on a v100
(BadConstraints) and refused --mem-per-gpu ("Invalid generic resource")."""

from __future__ import annotations

import time

import pytest

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm

OUT = ("-o", "/dev/null")
MANAGED = ("--comment=gavel:type=A3C", "-p", "gpu", *OUT)
SLEEP = ("--wrap", "sleep 300")


def on(round_index: int, jobs: dict[str, tuple[str, str]]) -> RoundPlacement:
    """Each job on one GPU of the (type, node) named."""
    return RoundPlacement(
        round_index,
        time.time(),
        {j: JobPlacement(j, t, (NodeSlice(node, 1),)) for j, (t, node) in jobs.items()},
    )


def test_types_constraints_and_memory_bind_placement(slurm):
    slurm.cancel_all()
    try:
        # a plain CPU job holding all of v100-1's memory: its 4 GPUs are free, unusable
        hog = slurm.sbatch("-p", "gpu", "-w", "v100-1", "--mem=64000", *OUT, *SLEEP)
        slurm.wait_state(hog, "RUNNING")
        typed = slurm.sbatch(*MANAGED, "--gres=gpu:p100:1", *SLEEP)
        per_job = slurm.sbatch(*MANAGED, "--gpus=k80:1", *SLEEP)
        feature = slurm.sbatch(*MANAGED, "--constraint=p100|k80", "--exclude=k80-1", *SLEEP)
        plain = slurm.sbatch(*MANAGED, *SLEEP)
        mem_gpu = slurm.sbatch(*MANAGED, "--gres=gpu:2", "--mem-per-gpu=3000", *SLEEP)
        cpu_gpu = slurm.sbatch(*MANAGED, "--gpus=1", "--cpus-per-gpu=3", *SLEEP)
        # --prefer (23.02+; 22.05's sbatch has none): a soft wish, read on every release
        prefer = slurm.sbatch(*MANAGED, "--prefer=k80", *SLEEP) if slurm.release != "22.05" else ""
        refused = slurm.cmd("sbatch", *MANAGED, "-w", "v100-2", *SLEEP, check=False)
        assert refused.returncode != 0
        if slurm.release != "22.05":  # 22.05 shows "Unspecified error" (slurm-gavel explain)
            assert "--exclude" in refused.stderr, refused.stderr

        # slurmrestd's /jobs and /nodes say the same (every release's REST transport)
        rest = rest_backend(rest_up(slurm.run_dir), env=slurm.env).observe()
        by_rest = {o.job.id: o.allowed for o in rest.jobs}
        b = cli_backend(env=slurm.env)
        snap = b.observe()
        jobs = {o.job.id: o for o in snap.jobs}
        if prefer:
            wish = jobs[prefer].allowed
            assert wish is not None and wish.preferred == {"k80-1", "k80-2"}, wish
            assert wish.types == {"v100", "p100", "k80"} and "k80" not in wish.why  # soft
        for job in (typed, per_job, feature, plain):
            assert by_rest[job] == jobs[job].allowed, (job, by_rest[job], jobs[job].allowed)
        assert jobs[typed].allowed is not None and jobs[typed].allowed.types == {"p100"}
        assert jobs[per_job].allowed is not None and jobs[per_job].allowed.types == {"k80"}
        assert jobs[feature].allowed is not None
        assert jobs[feature].allowed.nodes == {"p100-1", "p100-2", "k80-2"}
        # the node whose memory the plain job holds is free for nobody
        assert "v100-1" not in jobs[plain].allowed.nodes  # type: ignore[union-attr]
        assert "MB memory" in jobs[plain].allowed.why  # type: ignore[union-attr]
        assert jobs[mem_gpu].job.scale_factor == 2
        mem = slurm.show(mem_gpu)
        assert mem.get("MinMemoryNode") == "6000M", mem  # --mem-per-gpu 3000 x 2 per node

        # never placed where its own request fails: refused with the reason
        res = b.act(
            on(0, {typed: ("v100", "v100-2"), feature: ("k80", "k80-1"), plain: ("v100", "v100-1")})
        )
        failed = dict(res.failed)
        assert "asks for p100 GPUs" in failed[typed]
        assert "--exclude" in failed[feature]
        assert "memory" in failed[plain]
        assert res.started == ()
        for job in (typed, feature, plain):
            assert slurm.show(job)["Priority"] == "0", slurm.why(job)

        # placed where it may: it runs there, its type kept
        b.observe()
        res = b.act(
            on(
                1,
                {
                    typed: ("p100", "p100-1"),
                    feature: ("p100", "p100-2"),
                    per_job: ("k80", "k80-1"),
                    cpu_gpu: ("v100", "v100-2"),
                },
            )
        )
        assert set(res.started) == {typed, feature, per_job, cpu_gpu}, res
        for job, node in ((typed, "p100-1"), (feature, "p100-2"), (per_job, "k80-1")):
            slurm.wait_state(job, "RUNNING")
            assert slurm.show(job)["NodeList"] == node
        slurm.wait_state(cpu_gpu, "RUNNING")
        assert slurm.show(cpu_gpu)["NumCPUs"] == "3"  # --cpus-per-gpu kept
        assert "p100" in slurm.show(typed).get("TresPerNode", "")
    finally:
        slurm.cancel_all()
