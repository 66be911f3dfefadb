"""The AdminComment write on the real cluster of each release, through scontrol (the CLI
backend) and through slurmrestd (the REST backend): the text arrives whole, spaces
and all, for several jobs at once, and a job that is gone fails alone."""

from __future__ import annotations

import re

import pytest

from slurm_gavel.backends.slurm.admin_comment import PREFIX
from slurm_gavel.backends.slurm.backend import SlurmBackend
from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.backends.slurm.rest.transport import rest_backend
from slurm_gavel_dev.localcluster_rest import rest_up

pytestmark = pytest.mark.slurm

TEXT = "waiting: jobs with a higher priority took every GPU (policy max_min_fairness)"


def held_job(slurm) -> str:
    return slurm.sbatch("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null",
                        "--wrap", "sleep 60")  # fmt: skip


def admin_comment(slurm, job_id: str) -> str:
    out = slurm.cmd("scontrol", "show", "job", "--oneliner", job_id).stdout
    m = re.search(r"AdminComment=(.*?)(?= [A-Za-z]+=|\s*$)", out)
    return m.group(1).strip() if m else ""


@pytest.mark.parametrize("backend", ["cli", "rest"])
def test_admin_comment_reaches_slurm_whole(slurm, backend):
    if backend == "rest":
        sock = rest_up(slurm.run_dir)
        cluster: SlurmBackend = rest_backend(sock, env=slurm.env)
    else:
        cluster = cli_backend(env=slurm.env)
    a, b = held_job(slurm), held_job(slurm)
    failed = cluster.set_admin_comments({a: TEXT, b: TEXT, "999999": TEXT})
    assert set(failed) == {"999999"}, failed  # the job Slurm does not know fails alone
    assert admin_comment(slurm, a) == admin_comment(slurm, b) == PREFIX + TEXT
    assert slurm.state(a) == "PENDING"  # still held: the comment changed nothing else
    failed = cluster.set_admin_comments({a: "running on v100 (v100-1)"})
    assert failed == {} and admin_comment(slurm, a) == PREFIX + "running on v100 (v100-1)"
