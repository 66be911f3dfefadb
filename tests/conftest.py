"""Root conftest: the real local Slurm cluster for tests marked ``@pytest.mark.slurm``.

The cluster (tools/local-cluster: one slurmctld, one slurmd per emulated GPU node)
starts once per test session, on free ports in a private run dir, the first time
a test asks for the ``slurm`` fixture, and is stopped (by pid) at the end.

* ``SLURM_GAVEL_TEST_CLUSTER=DIR`` reuses a cluster already started in DIR with the
  default topology (``tools/local-cluster up --dir DIR``); it is left running.
* ``SLURM_GAVEL_TEST_SPANK=/path/plugin.so`` loads a SPANK plugin into the cluster.
* Without Slurm installed the slurm tests are skipped, unless
  ``SLURM_GAVEL_REQUIRE_SLURM=1`` (CI) makes that an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_gavel import localcluster
from slurm_gavel.localcluster_conf import ClusterSpec

REPO = Path(__file__).resolve().parent.parent


@dataclass
class LocalSlurm:
    """A running local cluster and small helpers for tests."""

    run_dir: Path
    spec: ClusterSpec

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.run_dir / "slurm.conf")}

    def cmd(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            check=check,
            env={**os.environ, **self.env},
            timeout=60,
        )

    def sbatch(self, *args: str) -> str:
        """Submit; returns the job id."""
        out = self.cmd("sbatch", "--parsable", *args).stdout.strip()
        return out.split(";")[0]

    def sbatch_ignoring_the_signal(self) -> str:
        """A managed A3C job whose script ignores the checkpoint signal (SIGUSR1): what
        the requeue-hold after the grace period is for."""
        return self.sbatch(
            "--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null",
            "--wrap", "trap '' USR1; sleep 300",
        )  # fmt: skip

    def state(self, job_id: str) -> str:
        res = self.cmd("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T", check=False)
        return res.stdout.strip() or "GONE"

    def show(self, job_id: str) -> dict[str, str]:
        """scontrol show job as key -> value (first occurrence)."""
        out = self.cmd("scontrol", "show", "job", "--oneliner", job_id).stdout
        fields: dict[str, str] = {}
        for tok in out.split():
            k, _, v = tok.partition("=")
            fields.setdefault(k, v)
        return fields

    def wait_state(self, job_id: str, *states: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        st = ""
        while time.monotonic() < deadline:
            st = self.state(job_id)
            if st in states:
                return st
            time.sleep(0.2)
        # Say why (Reason, ExitCode, node): a flaky CI failure must be diagnosable.
        raise AssertionError(
            f"job {job_id} is {st}, not {states} after {timeout}s ({self.why(job_id)})"
            f"\n{self.log_lines(job_id)}"
        )

    def why(self, job_id: str) -> str:
        """The scontrol fields that say how a job ended or why it waits."""
        info = self.cmd("scontrol", "show", "job", "--oneliner", job_id, check=False)
        keep = ("JobState", "Reason", "ExitCode", "Restarts", "NodeList", "BatchHost",
                "RunTime", "Requeue", "Comment")  # fmt: skip
        return " ".join(t for t in info.stdout.split() if t.split("=")[0] in keep)

    def log_lines(self, job_id: str, limit: int = 30) -> str:
        """The daemons' log lines about one job (slurmctld's and every slurmd's)."""
        pattern = re.compile(rf"(JobId={job_id}|job {job_id}|\[{job_id}\.|JOB {job_id})\b")
        lines = []
        for log in sorted((self.run_dir / "log").glob("*.log")):
            lines += [
                f"{log.stem}: {line}"
                for line in log.read_text(errors="replace").splitlines()
                if pattern.search(line)
            ]
        return "\n".join(lines[-limit:]) or "(no log lines)"

    def cancel_all(self) -> None:
        ids = self.cmd("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if ids:
            self.cmd("scancel", *ids, check=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            left = self.cmd(
                "squeue",
                "-h",
                "-t",
                "pending,running,completing,special_exit",
                "-o",
                "%i",
                check=False,
            ).stdout.split()
            if not left:
                break
            time.sleep(0.2)
        names = ",".join(n for n, _ in self.spec.node_names())
        self.cmd("scontrol", "update", f"NodeName={names}", "State=RESUME", check=False)


def _slurm_installed() -> bool:
    return all(
        shutil.which(b) or Path("/usr/sbin", b).exists()
        for b in ("slurmctld", "slurmd", "sbatch", "munged")
    )


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[LocalSlurm]:
    reuse = os.environ.get("SLURM_GAVEL_TEST_CLUSTER")
    if reuse:
        run = Path(reuse).resolve()
        if not localcluster.is_up(run):
            pytest.fail(f"SLURM_GAVEL_TEST_CLUSTER={run}: no cluster is up there")
        spec = ClusterSpec(**localcluster.read_state(run)["spec"])
        yield LocalSlurm(run, spec)
        return
    if not _slurm_installed() or os.geteuid() != 0:
        if os.environ.get("SLURM_GAVEL_REQUIRE_SLURM") == "1":
            pytest.fail(
                "Slurm tests required but Slurm is not installed or not root: "
                "run tools/setup as root"
            )
        pytest.skip("Slurm not installed (or not root): run tools/setup as root")
    run = Path(tempfile.mkdtemp(prefix="slurm-gavel-test-"))
    os.chmod(run, 0o755)
    spank = os.environ.get("SLURM_GAVEL_TEST_SPANK")
    spec = ClusterSpec(spank=[f"optional {Path(spank).resolve()}"] if spank else [])
    try:
        localcluster.up(spec, run, port_base_auto=True)
        yield LocalSlurm(run, spec)
    finally:
        localcluster.down(run)
        shutil.rmtree(run, ignore_errors=True)


@pytest.fixture
def slurm(slurm_session: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's cluster, with every job cancelled after the test."""
    slurm_session.cancel_all()
    yield slurm_session
    slurm_session.cancel_all()
