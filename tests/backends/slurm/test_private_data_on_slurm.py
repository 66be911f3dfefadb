"""`status_privacy: auto` reads Slurm's PrivateData from the real `scontrol show config`
of each release: "none" on the local cluster (auto -> public), and once slurm.conf
says `PrivateData=jobs` (appended, `scontrol reconfigure`, then restored), auto ->
private, while squeue as a plain user stops listing root's job (the behaviour the
private view follows)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from private_data import private_data_jobs

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel.daemon.publish import privacy
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm


def held_job(slurm) -> str:
    return slurm.sbatch("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null",
                        "--wrap", "sleep 60")  # fmt: skip


def seen_by_nobody(slurm, job_id: str) -> bool:
    res = slurm.as_user("nobody", "squeue", "-h", "-o", "%i")
    assert res.returncode == 0, res.stderr
    return job_id in res.stdout.split()


@pytest.fixture
def private_jobs(slurm) -> Iterator[object]:
    with private_data_jobs(slurm):
        yield slurm


def test_auto_is_public_where_slurm_hides_nothing(slurm):
    cluster = cli_backend(env=slurm.env)
    assert cluster.private_data() == "none"
    private, why = privacy("auto", cluster)
    assert not private and why.endswith("PrivateData (none) does not hide jobs")
    assert seen_by_nobody(slurm, held_job(slurm))  # squeue shows it: so does status


def test_auto_is_private_under_private_data_jobs(private_jobs):
    slurm = private_jobs
    cluster = cli_backend(env=slurm.env)
    private, why = privacy("auto", cluster)
    assert private and why.endswith("PrivateData (jobs) hides jobs")
    assert not seen_by_nobody(slurm, held_job(slurm))  # squeue hides it: so does status


def test_rest_backend_reads_it_through_scontrol_or_says_it_cannot(slurm):
    sock = rest_up(slurm.run_dir)
    assert privacy("auto", rest_backend(sock, env=slurm.env))[0] is False
    private, why = privacy("auto", rest_backend(sock, env=slurm.env, cli_fallback=False))
    assert private and "slurmrestd does not publish Slurm's PrivateData" in why
