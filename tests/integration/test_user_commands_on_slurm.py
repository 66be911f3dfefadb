"""The user commands as a centre's users run them: `slurm-gavel explain`, `status` and
`refused` of an install, run as a plain user (nobody) by its console script against a
running daemon's state, on each release.

The installs: when tools/test sets SLURM_GAVEL_INSTALLED_CLI, the admin guide's
(tools/check-install, on tools/user-python's interpreter), and this venv where its
interpreter is one other users can run. Each runs as users run it: its
bin/slurm-gavel, whose `#!` names the venv's interpreter, with nothing of the test's
environment (no PYTHONPATH). A venv built on an interpreter under /root (pyenv's,
0700) failed all three for every user but root with "Permission denied".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_least_privilege import RUNUSER

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics

pytestmark = [pytest.mark.slurm]

USER = "nobody"
INSTALLED = "SLURM_GAVEL_INSTALLED_CLI"


def installs() -> dict[str, Path]:
    """label -> the bin/slurm-gavel of each install to check: the admin guide's
    (tools/check-install, in the full run), and this venv where other users can run its
    interpreter (the developer venv may sit on one under /root: tools/setup says why),
    or when there is no other install to check (then it fails with the fix)."""
    out: dict[str, Path] = {}
    if os.environ.get(INSTALLED):
        out["installed"] = Path(os.environ[INSTALLED])
    runnable = (os.stat(os.path.realpath(sys.executable)).st_mode & 0o001) and all(
        os.stat(p).st_mode & 0o001 for p in Path(os.path.realpath(sys.executable)).parents
    )
    if runnable or not out:
        out["venv"] = Path(sys.prefix) / "bin" / "slurm-gavel"
    return out


def as_user(cli: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`slurm-gavel ARGV` as the plain user, from /tmp, in a bare environment."""
    return subprocess.run(
        [RUNUSER, "-u", USER, "--", str(cli), *argv],
        capture_output=True, text=True, timeout=120, cwd="/tmp",
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip


def shown(cli: Path, res: subprocess.CompletedProcess[str]) -> str:
    """What a failure says: the command's output, and the fix where it is the install's."""
    text = f"exit {res.returncode}\nstdout: {res.stdout[-1500:]}\nstderr: {res.stderr[-1500:]}"
    if "Permission denied" in res.stderr:
        text += (
            f"\n{cli} runs {os.path.realpath(cli.parent / 'python')}, which {USER} cannot "
            "run: rebuild the venv on an interpreter every user can run (tools/user-python; "
            "for .venv: rm -rf .venv && tools/setup)"
        )
    return text


@pytest.mark.parametrize("install", list(installs()))
def test_a_plain_user_runs_explain_status_and_refused(slurm, install):
    cli = installs()[install]
    assert cli.is_file(), f"{install}: no {cli}"
    site = Path(tempfile.mkdtemp(prefix="gavel-user-cmds-", dir="/tmp"))
    os.chmod(site, 0o755)
    state = site / "state"
    cfg = parse_config(
        {"partitions": ["gpu"], "round_seconds": 5, "state_dir": str(state),
         "checkpoint": {"grace_seconds": 3}}
    )  # fmt: skip
    daemon = Daemon(cfg, cli_backend(managed_partitions=["gpu"], env=slurm.env, grace_s=5),
                    metrics=DaemonMetrics())  # fmt: skip
    try:
        res = slurm.as_user(
            USER, "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null", "-p", "gpu",
            "--comment=gavel:type=A3C", "--wrap", "trap 'exit 99' USR1; sleep 300 & wait",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        job = res.stdout.strip().split(";")[0]
        daemon.start()
        os.chmod(state, 0o755)  # as StateDirectoryMode= does
        daemon.round()
        slurm.wait_state(job, "RUNNING")
        # the owner's release of a managed job is refused; the Lua records why
        assert slurm.as_user(USER, "scontrol", "release", job).returncode != 0

        why = as_user(cli, "explain", job, "--state-dir", str(state))
        assert why.returncode == 0, shown(cli, why)
        assert why.stdout.startswith(f"job {job} ({USER}, ") and "running on " in why.stdout

        mine = as_user(cli, "status", "--state-dir", str(state), "--me", "--json")
        assert mine.returncode == 0, shown(cli, mine)
        doc = json.loads(mine.stdout)
        assert [j["id"] for j in doc["jobs"]] == [job], doc["jobs"]
        assert doc["jobs"][0]["user"] == USER

        refused = as_user(cli, "refused", "--dir", str(slurm.run_dir / "refused"))
        assert refused.returncode == 0, shown(cli, refused)
        assert f"job {job} is managed" in refused.stdout, refused.stdout
    finally:
        daemon.store.release()
        slurm.cancel_all()
        shutil.rmtree(site, ignore_errors=True)
