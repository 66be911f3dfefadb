"""The plugin on the real local Slurm cluster (tests/conftest.py starts it with the plugin
loaded, see this folder's conftest.py): sbatch --gavel-* reaches the job's comment (as
slurm_gavel.managed reads it) and environment; a bad type is refused at submit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from spank_build import ensure_built

from slurm_gavel.managed import parse_comment

BUILD_ERROR = ensure_built()

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster(slurm):  # type: ignore[no-untyped-def]
    assert BUILD_ERROR is None, BUILD_ERROR
    loaded = (slurm.run_dir / "plugstack.conf").read_text()
    if "slurm-gavel.so" not in loaded:
        pytest.fail(
            f"the session cluster did not load the plugin (plugstack: {loaded!r}); "
            "SLURM_GAVEL_TEST_SPANK was set after the cluster started"
        )
    return slurm


def comment(slurm, job: str) -> str:  # type: ignore[no-untyped-def]
    return slurm.cmd("squeue", "-h", "-j", job, "-o", "%k").stdout.strip()


def test_job_type_becomes_the_comment_and_the_environment(cluster, tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    job = cluster.sbatch(
        "--gavel-job-type=resnet-50 (batch size 64)",
        "--gavel-priority=2",
        "--gavel-steps=500",
        f"--gavel-checkpoint-dir={tmp_path}/ck",
        "-o",
        str(out),
        "--wrap",
        "env",
    )
    spec = parse_comment(comment(cluster, job), job_id=job)
    assert spec is not None
    # the case-insensitive match is canonicalised to the table's spelling
    assert spec.job_type == "ResNet-50 (batch size 64)"
    assert (spec.priority_weight, spec.total_steps) == (2.0, 500)
    assert cluster.show(job)["Priority"] == "0"  # held on arrival (job_submit.lua)
    cluster.cmd("scontrol", "release", job)
    cluster.wait_state(job, "COMPLETED", "GONE", timeout=60)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["GAVEL_JOB_TYPE"] == "ResNet-50 (batch size 64)"
    assert env["SLURM_SPANK_GAVEL_JOB_TYPE"] == "ResNet-50 (batch size 64)"
    assert env["GAVEL_PRIORITY"] == "2" and env["GAVEL_TOTAL_STEPS"] == "500"
    assert env["GAVEL_CHECKPOINT_DIR"] == f"{tmp_path}/ck"


def test_export_none_still_carries_the_type(cluster, tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    job = cluster.sbatch(
        "--export=NONE",
        "--gavel-job-type=A3C",
        "--gavel-scale=1",
        "-o",
        str(out),
        "--wrap",
        "/usr/bin/env",
    )
    assert comment(cluster, job) == "gavel:type=A3C,scale=1"
    cluster.cmd("scontrol", "release", job)
    cluster.wait_state(job, "COMPLETED", "GONE", timeout=60)
    assert "SLURM_SPANK_GAVEL_JOB_TYPE=A3C" in out.read_text().splitlines()


def test_unknown_type_is_refused_at_submit_with_the_known_types(cluster) -> None:
    res = cluster.cmd("sbatch", "--gavel-job-type=VGG-16", "--wrap", "true", check=False)
    assert res.returncode != 0 and "Submitted" not in res.stdout
    assert "unknown job type 'VGG-16'" in res.stderr
    assert "ResNet-50 (batch size 64)" in res.stderr and "CycleGAN" in res.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--comment=my notes", "--gavel-job-type=A3C"], "is taken"),
        (["--gavel-scale=2"], "need --gavel-job-type"),
        (["--gavel-job-type=A3C", "--gavel-scale=two"], "expected a whole number"),
    ],
)
def test_inconsistent_options_are_refused(cluster, args: list[str], message: str) -> None:
    before = cluster.cmd("squeue", "-h", "-o", "%i").stdout.split()
    res = cluster.cmd("sbatch", *args, "--wrap", "true", check=False)
    assert res.returncode != 0 and message in res.stderr
    assert cluster.cmd("squeue", "-h", "-o", "%i").stdout.split() == before


def test_srun_sees_the_options_too(cluster) -> None:
    res = cluster.cmd("srun", "--help")
    assert "--gavel-job-type" in res.stdout
    res = cluster.cmd("salloc", "--help")
    assert "--gavel-job-type" in res.stdout
    assert os.environ.get("SLURM_GAVEL_TEST_SPANK")
    # an unknown type fails before any allocation is requested
    res = subprocess.run(
        ["srun", "--gavel-job-type=nope", "true"],
        capture_output=True,
        text=True,
        env={**os.environ, **cluster.env},
        timeout=60,
    )
    assert res.returncode != 0 and "unknown job type" in res.stderr
