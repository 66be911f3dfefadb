"""Accounting for the local cluster (`tools/local-cluster up --accounting`).

What a production site runs: slurmdbd storing jobs in MariaDB, so that `sacct` and
`sreport` answer. `up --accounting` starts, in this order, each recorded by pid in
DIR/cluster.json and stopped by `down`:

* MariaDB (Debian's mariadb-server, always the host's, also for a chroot release)
  with its data in DIR/db, listening on 127.0.0.1 at the port after the slurmds'
  and on DIR/db/mysqld.sock; a database user for slurmdbd with a random password;
* slurmdbd, the cluster's own release (inside the chroot for 24.11/26.05),
  on the next port, talking to MariaDB over TCP loopback;
* then registers the cluster, the accounts and their users with sacctmgr, before
  slurmctld starts (slurm.conf names accounting_storage/slurmdbd; see
  localcluster_conf.accounting_lines).

The comment of a job reaches the database only with AccountingStoreFlags=job_comment
(Slurm >= 21.08; before, AccountingStoreJobComment): `slurm-gavel trace from-sacct`
reads the `gavel:` comment back from there.
Standard library only (the docker images run tools/local-cluster without a venv).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from slurm_gavel_dev.localcluster_conf import REPO, ClusterError, ClusterSpec, dbd_port, release
from slurm_gavel_dev.localcluster_state import log_tail, ours

# Accounts and their users registered on `up --accounting`; a user's default account
# is the first one naming them. root submits the tests' jobs (either account, with
# -A); nobody is the plain user the tests act as (runuser, or SLURM_GAVEL_RUN_AS).
ACCOUNTS: dict[str, tuple[str, ...]] = {"physics": ("root",), "biology": ("nobody", "root")}
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"
# Starter is `start(name, argv, on_host)`: records the pid in the cluster's state.
Starter = Callable[[str, list[str], bool], int]


def mariadb_port(spec: ClusterSpec) -> int:
    return dbd_port(spec) + 1


# --- installation ------------------------------------------------------------------


def mariadb_bins() -> tuple[str, str] | None:
    """(mariadbd, mariadb-install-db) of the host, or None when not installed."""
    daemon = shutil.which("mariadbd") or _sbin("mariadbd")
    install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    return (daemon, install) if daemon and install else None


def _sbin(name: str) -> str | None:
    path = Path("/usr/sbin") / name
    return str(path) if path.exists() else None


def ensure_installed(spec: ClusterSpec) -> None:
    """MariaDB on the host, slurmdbd of the release (host, or inside its chroot)."""
    rel = release(spec.slurm)
    missing = [] if mariadb_bins() else ["mariadb-server"]
    if not rel.in_chroot and not (shutil.which("slurmdbd") or _sbin("slurmdbd")):
        missing.append("slurmdbd")
    if missing:
        if os.geteuid() != 0:
            raise ClusterError(f"--accounting needs {' '.join(missing)}: run tools/setup as root")
        subprocess.run(["bash", str(REPO / "tools" / "setup"), "--accounting-only"], check=True)
    if rel.in_chroot:
        ensure_chroot_slurmdbd(rel.name)


def ensure_chroot_slurmdbd(name: str) -> None:
    """The release's slurmdbd inside its cached chroot (built before accounting
    existed): apt-get inside it, under the chroot build lock."""
    from slurm_gavel_dev import localcluster_chroot as chroot

    rel = chroot.release(name)
    root = chroot.ensure_chroot(rel)
    if (root / "usr" / "sbin" / "slurmdbd").exists():
        return
    if os.geteuid() != 0:
        raise ClusterError(f"the Slurm {name} chroot has no slurmdbd; run tools/setup as root")
    with chroot.build_lock(rel):
        if (root / "usr" / "sbin" / "slurmdbd").exists():
            return
        resolv = root / "etc" / "resolv.conf"
        with contextlib.suppress(OSError):
            if not resolv.exists() or not resolv.read_text().strip():
                shutil.copyfile("/etc/resolv.conf", resolv)
        # apt.conf lines (mmdebstrap --aptopt) as apt-get -o KEY=VALUE
        opts = [
            f"-o{k}={v.strip().strip(chr(34))}"
            for k, v in (o.split(" ", 1) for o in rel.apt_options)
        ]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (
            ["apt-get", *opts, "update", "-qq"],
            ["apt-get", *opts, "install", "-y", "-qq", "--no-install-recommends", "slurmdbd"],
        ):
            res = subprocess.run(
                ["chroot", str(root), *argv], capture_output=True, text=True, env=env
            )
            if res.returncode != 0:
                raise ClusterError(
                    f"installing slurmdbd in the Slurm {name} chroot failed: "
                    f"{res.stderr.strip()[-800:]}"
                )


# --- start-up ----------------------------------------------------------------------


def start(spec: ClusterSpec, run: Path, launch: Starter) -> None:
    """MariaDB, the database user, slurmdbd, then the cluster, accounts and users."""
    rel = release(spec.slurm)
    bins = mariadb_bins()
    if bins is None:
        raise ClusterError("mariadb-server is not installed: run tools/setup as root")
    daemon, install = bins
    db = run / "db"
    shutil.rmtree(db, ignore_errors=True)
    db.mkdir(mode=0o700)
    res = subprocess.run(
        [install, "--no-defaults", f"--datadir={db}/data", "--user=root", "--skip-test-db",
         "--auth-root-authentication-method=socket"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if res.returncode != 0:
        raise ClusterError(f"mariadb-install-db failed: {res.stderr.strip()[-800:]}")
    sock = db / "mysqld.sock"
    pid = launch(
        "mariadbd",
        [daemon, "--no-defaults", f"--datadir={db}/data", "--user=root",
         f"--socket={sock}", f"--port={mariadb_port(spec)}", "--bind-address=127.0.0.1",
         f"--pid-file={db}/mariadbd.pid", f"--log-error={run}/log/mariadbd.log",
         "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
         # slurmdbd's documented minimums (its start-up warns below them)
         "--innodb-lock-wait-timeout=900", "--innodb-log-file-size=64M"],
        True,
    )  # fmt: skip
    password = secrets.token_hex(16)
    _wait(lambda: _sql(sock, "SELECT 1") is None, "mariadbd", run, 60, pid)
    err = _sql(
        sock,
        f"CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}'; "
        f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';",
    )
    if err:
        raise ClusterError(f"creating the slurmdbd database user failed: {err}")
    _write_dbd_conf(spec, run, password)
    sbin = "/usr/sbin/slurmdbd" if rel.in_chroot else (shutil.which("slurmdbd") or "slurmdbd")
    # slurmdbd has no -f: it reads slurmdbd.conf beside $SLURM_CONF (the run dir's).
    pid = launch("slurmdbd", [sbin, "-D"], False)
    _wait(lambda: _listening(dbd_port(spec)), "slurmdbd", run, 60, pid)
    register(spec, run)


def _sql(sock: Path, statement: str) -> str | None:
    """Run SQL as MariaDB's root (unix socket auth); None on success, else the error."""
    client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
    res = subprocess.run(
        [client, "--no-defaults", f"--socket={sock}", "-u", "root", "-e", statement],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return None if res.returncode == 0 else (res.stderr.strip() or f"exit {res.returncode}")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(ready: Callable[[], bool], name: str, run: Path, timeout: float, pid: int) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if not ours(pid, run):
            raise ClusterError(f"{name} exited during start-up: {log_tail(run, name)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{name} not ready after {timeout:.0f}s: {log_tail(run, name)}")
        time.sleep(0.2)


def _write_dbd_conf(spec: ClusterSpec, run: Path, password: str) -> None:
    """slurmdbd.conf: mode 0600 and owned by SlurmUser, or slurmdbd refuses it."""
    from slurm_gavel_dev import localcluster_chroot as chroot

    rel = release(spec.slurm)
    host = socket.gethostname().split(".")[0]
    lines = [
        "# Written by tools/local-cluster up --accounting.",
        "AuthType=auth/munge",
        *([f"AuthInfo=socket={run}/munge/munge.socket"] if rel.in_chroot else []),
        f"DbdHost={host}",
        "DbdAddr=127.0.0.1",
        f"DbdPort={dbd_port(spec)}",
        f"SlurmUser={rel.slurm_user}",
        "DebugLevel=info",
        f"LogFile={run}/log/slurmdbd.log",
        f"PidFile={run}/state/slurmdbd.pid",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={mariadb_port(spec)}",
        f"StorageUser={DB_USER}",
        f"StoragePass={password}",
        f"StorageLoc={DB_NAME}",
    ]
    path = run / "slurmdbd.conf"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    if rel.slurm_user != "root":
        uid, gid = chroot.user_ids(rel, rel.slurm_user)
        os.chown(path, uid, gid)


def sacctmgr(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURM_CONF": str(run / "slurm.conf")}
    if (run / "bin").is_dir():
        env["PATH"] = f"{run / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(
        ["sacctmgr", "-i", *args], capture_output=True, text=True, env=env, timeout=60
    )


def cluster_name(spec: ClusterSpec) -> str:
    return f"gavel{spec.port_base}"  # slurm.conf's ClusterName


def register(spec: ClusterSpec, run: Path) -> None:
    """The cluster, ACCOUNTS and their users; slurmdbd may take a moment to answer."""
    name = cluster_name(spec)
    steps = [["add", "cluster", name]]
    for account in ACCOUNTS:
        steps.append(["add", "account", account, f"cluster={name}", f"description={account}"])
    default: dict[str, str] = {}
    for account, users in ACCOUNTS.items():
        for user in users:
            default.setdefault(user, account)
            steps.append(
                ["add", "user", user, f"account={account}",
                 f"defaultaccount={default[user]}", f"cluster={name}"]
            )  # fmt: skip
    deadline = time.monotonic() + 30
    for argv in steps:
        while True:
            res = sacctmgr(run, *argv)
            text = res.stdout + res.stderr
            if res.returncode == 0 or "already exists" in text or "Nothing new" in text:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"sacctmgr {' '.join(argv)} failed: {text.strip()[-500:]}")
            time.sleep(0.5)
