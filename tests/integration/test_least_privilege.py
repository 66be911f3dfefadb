"""The daemon as the unprivileged account the systemd unit runs it as, on the real cluster.

The unit (conf/systemd/slurm-gavel.service) runs `slurm-gavel run` as its own user
with one capability (CAP_CHOWN). This runs the same command the same way (setpriv:
that uid and gid, bounding and ambient set CAP_CHOWN only, no new privileges) and
checks what it needs in practice: the Slurm client commands reach slurmctld through
munge, the state directory, lock and spool work, and without Slurm operator rights
the actions fail with an error that names the fix instead of crashing the daemon.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_release("22.05")]

REPO = Path(__file__).resolve().parents[2]
DAEMON_USER = "gavel-test-daemon"
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def ensure_user(name: str) -> pwd.struct_passwd:
    """A system account (no home, no login) as sysusers.d would make it; kept."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--shell", "/usr/sbin/nologin", name],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        return pwd.getpwnam(name)


def python_for(user: pwd.struct_passwd) -> list[str]:
    """An interpreter `user` can run with this checkout importable. The venv's python
    may live under /root (0700): then the system python 3.11 with the venv's
    site-packages, which is what a site's /opt/slurm-gavel venv gives that user."""
    venv_site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for exe in (sys.executable, f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"):
        probe = subprocess.run(
            [RUNUSER, "-u", user.pw_name, "--", exe, "-c", "import cvxpy, slurm_gavel"],
            capture_output=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{venv_site}/site-packages"},
        )  # fmt: skip
        if probe.returncode == 0:
            return [exe]
    pytest.fail(f"no python that {user.pw_name} can run slurm_gavel with ({sys.executable})")


@pytest.fixture(scope="module")
def daemon_user() -> pwd.struct_passwd:
    if not (shutil.which("useradd") and shutil.which("setpriv") and shutil.which("runuser")):
        pytest.fail("useradd, setpriv and runuser are needed (Debian: passwd, util-linux)")
    return ensure_user(DAEMON_USER)


@pytest.fixture
def site(daemon_user: pwd.struct_passwd) -> Iterator[Path]:
    """What the unit and tmpfiles.d set up: a state dir and a spool dir 0755, both
    the daemon's; under a folder every user can traverse (tmp_path is root's 0700)."""
    top = Path(tempfile.mkdtemp(prefix="gavel-site-", dir="/tmp"))
    os.chmod(top, 0o755)
    for name, mode in (("state", 0o755), ("progress", 0o755)):
        (top / name).mkdir(mode=mode)
        os.chown(top / name, daemon_user.pw_uid, daemon_user.pw_gid)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def site_config(site: Path) -> Path:
    """The daemon config of the site: 10 s rounds on partition gpu, JSON logs."""
    cfg = site / "gavel.yaml"
    cfg.write_text(
        "round_seconds: 10\npartitions: [gpu]\ncheckpoint: {grace_seconds: 3}\n"
        f"state_dir: {site / 'state'}\nprogress_dir: {site / 'progress'}\nlog_format: json\n"
    )
    return cfg


def run_as_daemon_user(
    user: pwd.struct_passwd, slurm, argv: list[str]
) -> subprocess.CompletedProcess[str]:
    venv_site = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    env = {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "PYTHONPATH": f"{REPO}:{venv_site}/site-packages",
        **slurm.env,
    }
    return subprocess.run(
        [SETPRIV, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
         "--inh-caps=-all,+chown", "--ambient-caps=-all,+chown", "--bounding-set=-all,+chown",
         "--no-new-privs", "--", *python_for(user), "-m", "slurm_gavel", *argv],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip


def test_the_daemon_runs_as_its_own_unprivileged_user(slurm, daemon_user, site):
    cfg = site_config(site)
    # A managed job of another user (nobody): held by job_submit.lua until the daemon acts.
    job_id = slurm.sbatch_as("nobody", "--comment=gavel:type=A3C", "--wrap", "sleep 30")

    res = run_as_daemon_user(daemon_user, slurm, ["run", "--config", str(cfg), "--once"])
    events = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
    names = [e.get("event") for e in events]
    # It read Slurm (munge, squeue/sinfo as a plain user), ran the round and saved it.
    assert "round" in names, res.stderr[-3000:]
    [rnd] = [e for e in events if e["event"] == "round"]
    assert rnd["active"] == 1, res.stderr[-3000:]
    state = site / "state" / "state.json"
    assert state.stat().st_uid == daemon_user.pw_uid
    assert json.loads(state.read_text())["scheduler"]["round_index"] == 1
    # Not an operator here (no slurmdbd: only root and SlurmUser are): the release of
    # another user's job is refused by slurmctld, and the daemon says so and what to do.
    failed = [e for e in events if e["event"] == "action_failed" and e.get("job") == job_id]
    assert failed and rnd["failed"] == 1, res.stderr[-3000:]
    [said] = [e for e in events if e["event"] == "not_a_slurm_operator"]
    assert said["level"] == "error" and said["user"] == DAEMON_USER and said["jobs"] == job_id
    assert f"sacctmgr -i add user {DAEMON_USER} account=root adminlevel=Operator" in said["fix"]
    assert res.returncode == 0  # the round itself succeeded: it observed and saved
    assert slurm.state(job_id) == "PENDING"


def test_with_operator_rights_from_sacctmgr_it_acts_on_other_users_jobs(
    slurm_accounting, daemon_user, site
):
    """The fix the daemon prints when it is not an operator, carried out on a cluster
    with slurmdbd: the same unprivileged account then releases and places another
    user's managed job (hold, release and update of other users' jobs need
    AdminLevel=Operator; the unit keeps CAP_CHOWN only)."""
    slurm = slurm_accounting
    grant = subprocess.run(
        ["sacctmgr", "-i", "add", "user", DAEMON_USER, "account=root", "adminlevel=Operator"],
        capture_output=True, text=True, env={**os.environ, **slurm.env}, timeout=60,
    )  # fmt: skip
    assert grant.returncode == 0 or "Nothing new added" in grant.stdout + grant.stderr, (
        grant.stdout + grant.stderr
    )
    # ... and the admin guide's other step: the daemon's uid in job_submit.lua's
    # DAEMON_UIDS (slurmctld re-reads the script when it changes).
    lua = slurm.run_dir / "job_submit.lua"
    shipped = lua.read_text()
    line = "local DAEMON_UIDS = { [0] = true }"
    assert line in shipped
    uids = f"local DAEMON_UIDS = {{ [0] = true, [{daemon_user.pw_uid}] = true }}"
    lua.write_text(shipped.replace(line, uids))
    try:
        _operator_round(slurm, daemon_user, site)
    finally:
        lua.write_text(shipped)


def _operator_round(slurm, daemon_user, site) -> None:
    cfg = site_config(site)
    job_id = slurm.sbatch_as(
        "nobody", "-A", "biology", "--comment=gavel:type=A3C", "--wrap", "sleep 30"
    )
    assert slurm.state(job_id) == "PENDING"  # held on arrival by job_submit.lua

    res = run_as_daemon_user(daemon_user, slurm, ["run", "--config", str(cfg), "--once"])
    events = [json.loads(line) for line in res.stderr.splitlines() if line.startswith("{")]
    [rnd] = [e for e in events if e["event"] == "round"]
    assert rnd["started"] == 1 and rnd["failed"] == 0, res.stderr[-3000:]
    assert not [e for e in events if e["event"] == "not_a_slurm_operator"], res.stderr[-3000:]
    # AdminComment needs AdminLevel=Administrator: said once, with the fix, not per round.
    [denied] = [e for e in events if e["event"] == "admin_comment_denied"]
    assert denied["level"] == "error" and "adminlevel=Administrator" in denied["fix"]
    assert not [e for e in events if e["event"] == "admin_comment_failed"]
    assert res.returncode == 0
    deadline = time.monotonic() + 60
    while slurm.state(job_id) != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert slurm.state(job_id) == "RUNNING", slurm.why(job_id)
