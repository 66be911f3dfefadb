"""`status` and `explain` as a plain user, and the AdminComment, on the real cluster.

The daemon runs in this process (root: the local cluster's operator) with the Slurm
CLI backend; a plain user (nobody) submits managed jobs with hostile job names and
then, on the host, runs `slurm-gavel status --me` and `explain` against the daemon's
state directory, which it can read only through the public status.json. The
daemon's reasons reach the jobs' AdminComment, where the user reads them with
scontrol, and rounds in which no decision changes issue no scontrol command.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_least_privilege import RUNUSER, python_for

from slurm_gavel.backends.slurm.cli.transport import cli_backend
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics

pytestmark = [pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
USER = "nobody"
# Job names are the user's own text: none of it may reach the view or the AdminComment.
HOSTILE_NAMES = ["it's; scancel -u root", "esc\x1b[2Jclear", "tab\there", "N" * 1000]
NOT_IN_TABLE = "Evil (batch size 1)"  # passes the comment grammar, not in the table


def submit(slurm, name: str, comment: str) -> str:
    res = slurm.as_user(
        USER, "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null", "-p", "gpu",
        "-J", name, f"--comment={comment}", "--wrap", "trap 'exit 99' USR1; sleep 300 & wait",
    )  # fmt: skip
    assert res.returncode == 0, (name, res.stderr)
    return res.stdout.strip().split(";")[0]


def admin_comment(slurm, job_id: str) -> str:
    """The job's AdminComment as scontrol shows it (its value has spaces)."""
    out = slurm.cmd("scontrol", "show", "job", "--oneliner", job_id).stdout
    m = re.search(r"AdminComment=(.*?)(?= [A-Za-z]+=|\s*$)", out)
    return m.group(1).strip() if m else ""


def as_nobody(python: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RUNUSER, "-u", USER, "--", *python, "-m", "slurm_gavel", *argv],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": _pythonpath()},
    )  # fmt: skip


def _pythonpath() -> str:
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return f"{REPO}:{Path(sys.prefix) / 'lib' / ver / 'site-packages'}"


def test_status_explain_and_admin_comment_for_a_plain_user(slurm):
    nobody = pwd.getpwnam(USER)
    python = python_for(nobody)
    site = Path(tempfile.mkdtemp(prefix="gavel-status-", dir="/tmp"))
    os.chmod(site, 0o755)
    state = site / "state"
    # knowledge: table, the mode in which a job type the table lacks is not scheduled
    # (the default, learned rows, runs it on an estimated prior: test_untyped_on_slurm.py)
    cfg = parse_config(
        {"partitions": ["gpu"], "round_seconds": 5, "state_dir": str(state),
         "checkpoint": {"grace_seconds": 3}, "learning": {"knowledge": "table"}}
    )  # fmt: skip
    backend = cli_backend(managed_partitions=["gpu"], env=slurm.env, grace_s=5)
    daemon = Daemon(cfg, backend, metrics=DaemonMetrics())
    try:
        jobs = [submit(slurm, name, "gavel:type=A3C") for name in HOSTILE_NAMES[:2]]
        two = "gavel:type=ResNet-50 (batch size 64),scale=2"
        jobs += [submit(slurm, name, two) for name in HOSTILE_NAMES[2:]]
        evil = submit(slurm, "plain", f"gavel:type={NOT_IN_TABLE}")
        daemon.start()
        os.chmod(state, 0o755)  # as StateDirectoryMode= does
        daemon.round()
        first = backend.transport.commands.counts["admin_comment"]
        texts = {j: admin_comment(slurm, j) for j in [*jobs, evil]}
        # One command per distinct text (the running jobs of a GPU type share one).
        assert first == len(set(texts.values())) < len(texts), (first, texts)
        for j in jobs:
            assert texts[j].startswith("slurm-gavel: running on "), texts
        assert texts[evil] == (
            "slurm-gavel: not scheduled: its job type is not in the throughput table of the site"
        )

        # Steady state: the same decisions, so no scontrol for AdminComments at all.
        for _ in range(3):
            time.sleep(1.5)
            daemon.round()
        assert backend.transport.commands.counts["admin_comment"] == first
        took = backend.transport.commands.seconds["admin_comment"] / first
        print(f"\nadmin_comment: {first} command(s) in round 1, {took * 1000:.0f} ms each; 0 in "
              f"rounds 2-4 ({slurm.release})")  # fmt: skip

        # The user reads the reason where users look: scontrol show job (their own job).
        seen = slurm.as_user(USER, "scontrol", "show", "job", jobs[0])
        assert "AdminComment=slurm-gavel: running on " in seen.stdout, seen.stdout

        # status as the plain user: the state is not readable, the view is.
        assert (state / "state.json").stat().st_mode & 0o077 == 0
        cat = subprocess.run([RUNUSER, "-u", USER, "--", "cat", str(state / "state.json")],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        assert cat.returncode != 0 and "Permission denied" in cat.stderr
        res = as_nobody(python, "status", "--state-dir", str(state), "--me", "--json")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["errors"] == [] and doc["meta"]["command"][1] == "status"
        mine = {j["id"]: j for j in doc["jobs"]}
        assert set(jobs) <= set(mine), (jobs, sorted(mine))
        assert {j["user"] for j in mine.values()} == {USER}
        assert mine[jobs[2]]["scale_factor"] == 2 and mine[jobs[0]]["job_type"] == "A3C"
        assert mine[jobs[2]]["job_type"] == "ResNet-50 (batch size 64)"
        text = (state / "status.json").read_text()
        for name in HOSTILE_NAMES:
            assert name[:12] not in text  # job names never reach the view
        table = as_nobody(python, "status", "--state-dir", str(state), "-u", USER,
                          "-o", "%i %u %j %M %T", "-h")  # fmt: skip
        assert table.returncode == 0, table.stderr
        rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()}
        assert rows[jobs[0]][1:3] == [USER, "A3C"] and rows[jobs[0]][4] == "running"
        assert len(rows[jobs[0]][3]) == 8  # HH:MM:SS
        why = as_nobody(python, "explain", jobs[0], "--state-dir", str(state))
        assert why.returncode == 0, why.stderr
        assert "running on " in why.stdout and "priority" in why.stdout
        # A state directory an old install left 0750: one line naming the fix.
        os.chmod(state, 0o750)
        denied = as_nobody(python, "status", "--state-dir", str(state))
        assert denied.returncode == 2 and f"chmod 0755 {state}" in denied.stderr, denied.stderr
    finally:
        daemon.store.release()
        shutil.rmtree(site, ignore_errors=True)
