"""Private status on the real cluster, end to end: with `PrivateData=jobs` in
slurm.conf the daemon (here, root, CLI backend, `status_privacy: auto`) reads it at
start and goes private; a plain user (nobody) then sees only their own managed jobs
with `slurm-gavel status` and `explain`, not root's, from their own view
status.d/<uid>.json (0600, theirs), while status.json lists no job."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from private_data import private_data_jobs
from test_least_privilege import python_for
from test_status_on_slurm import as_nobody, submit

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics

pytestmark = [pytest.mark.slurm]


def test_a_plain_user_sees_only_their_own_jobs_under_private_data_jobs(slurm, daemon_log):
    nobody = pwd.getpwnam("nobody")
    python = python_for(nobody)
    site = Path(tempfile.mkdtemp(prefix="gavel-private-", dir="/tmp"))
    os.chmod(site, 0o755)
    state = site / "state"
    cfg = parse_config({"partitions": ["gpu"], "round_seconds": 5, "state_dir": str(state),
                        "checkpoint": {"grace_seconds": 3}})  # fmt: skip
    backend = cli_backend(managed_partitions=["gpu"], env=slurm.env, grace_s=5)
    daemon = Daemon(cfg, backend, metrics=DaemonMetrics())
    try:
        with private_data_jobs(slurm):
            mine = submit(slurm, "mine", "gavel:type=A3C")
            roots = slurm.sbatch("--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null",
                                 "--wrap", "sleep 300")  # fmt: skip
            daemon.start()
            os.chmod(state, 0o755)  # as StateDirectoryMode= does
            daemon.round()
            modes = [r.fields for r in daemon_log if r.getMessage() == "status_privacy"]
            assert modes and modes[0]["mode"] == "private", modes

            public = json.loads((state / "status.json").read_text())
            assert public["private"] and public["jobs"] == [] and public["job_count"] == 2
            st = os.lstat(state / "status.d" / f"{nobody.pw_uid}.json")
            assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, nobody.pw_uid)

            res = as_nobody(python, "status", "--state-dir", str(state), "--json")
            assert res.returncode == 0, res.stderr
            assert [j["id"] for j in json.loads(res.stdout)["jobs"]] == [mine]
            other = as_nobody(python, "status", "--state-dir", str(state), "-u", "root")
            assert other.returncode == 2 and "PrivateData" in other.stderr, other.stderr
            why = as_nobody(python, "explain", roots, "--state-dir", str(state))
            assert why.returncode == 2 and "not one of your managed jobs" in why.stderr
            assert as_nobody(python, "explain", mine, "--state-dir", str(state)).returncode == 0
    finally:
        daemon.store.release()
        shutil.rmtree(site, ignore_errors=True)
