"""The plugin on the real local Slurm cluster (tests/conftest.py starts it with the plugin
loaded, see this folder's conftest.py): sbatch --gavel-* reaches the job's comment (as
slurm_gavel.domain.comment_grammar reads it) and environment; a bad type is refused at submit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurm_gavel.domain.comment_grammar import parse_comment

pytestmark = pytest.mark.slurm


def comment(slurm, job: str) -> str:  # type: ignore[no-untyped-def]
    # -t all: a job that ran `true` may have ended before this read, and squeue -j
    # without it printed nothing for it (26.05 under load)
    return slurm.cmd("squeue", "-h", "-t", "all", "-j", job, "-o", "%k").stdout.strip()


comment_of = comment


def test_job_type_becomes_the_comment_and_the_environment(cluster, tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    job = cluster.sbatch(
        "--gavel-job-type=resnet-50 (batch size 64)",
        "--gavel-priority=0.5",
        "--gavel-steps=500",
        "--gavel-grace=300",
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
    assert (spec.priority_weight, spec.total_steps, spec.grace) == (0.5, 500, 300)
    assert cluster.show(job)["Priority"] == "0"  # held on arrival (job_submit.lua)
    cluster.cmd("scontrol", "release", job)
    cluster.wait_state(job, "COMPLETED", "GONE", timeout=60)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["GAVEL_JOB_TYPE"] == "ResNet-50 (batch size 64)"
    assert env["SLURM_SPANK_GAVEL_JOB_TYPE"] == "ResNet-50 (batch size 64)"
    assert env["GAVEL_PRIORITY"] == "0.5" and env["GAVEL_TOTAL_STEPS"] == "500"
    assert env["GAVEL_CHECKPOINT_DIR"] == f"{tmp_path}/ck"


def test_gavel_flag_alone_makes_a_managed_job_of_no_type(cluster, tmp_path: Path) -> None:
    # no job type needed; the daemon learns the job's row as it runs
    out = tmp_path / "env.txt"
    job = cluster.sbatch("--gavel", "-o", str(out), "--wrap", "env")
    assert comment(cluster, job) == "gavel:"
    assert cluster.show(job)["Priority"] == "0"  # held on arrival (job_submit.lua)
    spec = parse_comment(comment(cluster, job), job_id=job)
    assert spec is not None and spec.job_type == ""
    both = cluster.sbatch(
        "--gavel", "--gavel-scale=2", "--gavel-priority=0.5", "--gavel-grace=60",
        "-o", "/dev/null", "--wrap", "true",
    )  # fmt: skip
    assert comment(cluster, both) == "gavel:scale=2,weight=0.5,grace=60"
    cluster.cmd("scancel", both)
    cluster.cmd("scontrol", "release", job)
    cluster.wait_state(job, "COMPLETED", "GONE", timeout=60)
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert "GAVEL_JOB_TYPE" not in env and "SLURM_SPANK_GAVEL_JOB_TYPE" not in env


def test_a_scale_range_reaches_the_comment(cluster) -> None:
    # moldable: --gavel-scale=MIN-MAX, one grammar with the comment's scale=MIN-MAX
    job = cluster.sbatch("--gavel", "--gavel-scale=1-8", "-o", "/dev/null", "--wrap", "true")
    assert comment(cluster, job) == "gavel:scale=1-8"
    spec = parse_comment(comment(cluster, job), job_id=job)
    assert spec is not None and (spec.scale_factor, spec.scale_range) == (1, (1, 8))
    cluster.cmd("scancel", job)


@pytest.mark.hostile(inputs=9)
def test_gavel_flag_with_hostile_values_is_refused_at_submit(cluster) -> None:
    for args, message in [
        *(
            ([f"--gavel-scale={r}"], "or a range MIN-MAX of them with MIN <= MAX")
            for r in ("8-2", "0-4", "1-1025", "1--4", "1-0x10")
        ),
        (["--gavel-priority=inf"], "must be a decimal number > 0"),
        (["--gavel-scale=0x10"], "must be a whole number from 1 to 1024"),
        (["--gavel-grace=30s"], "must be a whole number from 1 to 86400"),
        (["--comment=my notes"], "is taken"),
    ]:
        _refused_without_a_job(cluster, ["--gavel", *args], message)
    # a flag takes no value: sbatch itself refuses "--gavel=A3C"
    res = cluster.cmd("sbatch", "--gavel=A3C", "--wrap", "true", check=False)
    assert res.returncode != 0 and "Submitted" not in res.stdout


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
        (["--gavel-scale=2"], "need --gavel (or --gavel-job-type=TYPE)"),
        (["--gavel-job-type=A3C", "--gavel-scale=two"], "must be a whole number from 1 to 1024"),
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


# Hostile option values: each is refused at submit by the plugin with the reason, and no
# job is created (the values the old plugin let through stranded jobs: the Lua held
# them and the daemon refused their comment).
HOSTILE_OPTIONS = [
    (["--gavel-priority=1000"], "weight=1000 is above the cap 1 set by the admin"),
    (["--gavel-priority=1.000001"], "above the cap 1"),
    (["--gavel-priority=inf"], "must be a decimal number > 0"),
    (["--gavel-priority=nan"], "must be a decimal number > 0"),
    (["--gavel-priority=1e0"], "must be a decimal number > 0"),
    (["--gavel-priority=1e308"], "must be a decimal number > 0"),
    (["--gavel-priority=-1"], "must be a decimal number > 0"),
    (["--gavel-priority=0"], "must be a decimal number > 0"),
    (["--gavel-priority=0x1p0"], "must be a decimal number > 0"),
    (["--gavel-priority=+0.5"], "must be a decimal number > 0"),
    (["--gavel-priority=0.5 "], "must be a decimal number > 0"),
    (["--gavel-scale=0x10"], "must be a whole number from 1 to 1024"),
    (["--gavel-scale=1e0"], "must be a whole number from 1 to 1024"),
    (["--gavel-scale=1025"], "must be a whole number from 1 to 1024"),
    (["--gavel-scale=01"], "must be a whole number from 1 to 1024"),
    (["--gavel-scale=99999999999999999999999"], "must be a whole number"),
    (["--gavel-steps=1e6"], "must be a whole number from 1 to 1000000000000"),
    (["--gavel-steps=-5"], "must be a whole number"),
    *(
        ([f"--gavel-grace={v}"], "must be a whole number from 1 to 86400")
        for v in (
            "inf",
            "nan",
            "-1",
            "0",
            "1e3",
            "0x10",
            "99999999999999999999",
            " 30",
            "30s",
            "30.5",
            "86401",
        )
    ),
    (["--gavel-grace="], "--gavel-grace needs a value"),
]
HOSTILE_TYPES = [
    ("A3C\nweight=1000", "outside A-Z a-z 0-9"),
    ("A3C,weight=1000", "outside A-Z a-z 0-9"),
    ("\u540d\u524d", "outside A-Z a-z 0-9"),
    ("A3C\x1b[31m", "outside A-Z a-z 0-9"),
    ("x" * 65, "more than 64"),
]
HOSTILE_COMMENTS = [
    ("gavel:type=A3C,weight=1000", "above the cap 1"),
    (" gavel:type=A3C", "must open the comment"),
    ("GAVEL:type=A3C", "must open the comment"),
    ("gavel:type=A3C,scale=0x10", "must be a whole number"),
    ("gavel:type=A3C,weight=inf", "must be a decimal number > 0"),
    ("gavel:type=A3C,grace=1e3", "must be a whole number from 1 to 86400"),
    ("gavel:type=A3C,grace=30s", "must be a whole number from 1 to 86400"),
]


def _refused_without_a_job(cluster, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    before = cluster.cmd("squeue", "-h", "-o", "%i").stdout.split()
    res = cluster.cmd("sbatch", *args, "-o", "/dev/null", "--wrap", "true", check=False)
    assert res.returncode != 0 and "Submitted" not in res.stdout, res.stdout
    assert message in res.stderr, res.stderr
    # refused in sbatch by the plugin, not only later by job_submit.lua on the controller
    assert "Invalid --gavel-" in res.stderr or "slurm-gavel: job not submitted" in res.stderr
    assert cluster.cmd("squeue", "-h", "-o", "%i").stdout.split() == before


@pytest.mark.hostile(guards="escalation", inputs=len(HOSTILE_OPTIONS))
def test_hostile_option_values_are_refused_at_submit(cluster) -> None:
    for args, message in HOSTILE_OPTIONS:
        _refused_without_a_job(cluster, ["--gavel-job-type=A3C", *args], message)


@pytest.mark.hostile(inputs=len(HOSTILE_TYPES))
def test_hostile_job_types_are_refused_at_submit(cluster) -> None:
    for job_type, message in HOSTILE_TYPES:
        _refused_without_a_job(cluster, [f"--gavel-job-type={job_type}"], message)


@pytest.mark.hostile(guards="escalation", inputs=len(HOSTILE_COMMENTS))
def test_hand_written_gavel_comments_are_checked_by_the_plugin(cluster) -> None:
    for comment, message in HOSTILE_COMMENTS:
        _refused_without_a_job(cluster, [f"--comment={comment}"], message)
    # the refusal is the plugin's (in sbatch), before the controller sees the job
    res = cluster.cmd("sbatch", "--comment=gavel:type=A3C,weight=2", "--wrap", "true", check=False)
    assert "slurm-gavel: --comment refused" in res.stderr
    assert "slurm-gavel: job not submitted" in res.stderr  # the plugin's refusal, not the Lua's
    job = cluster.sbatch("--comment=my notes", "-o", "/dev/null", "--wrap", "true")
    assert comment_of(cluster, job) == "my notes"
