"""slurmrestd for the local cluster (`tools/local-cluster rest`, `up --rest`).

On a unix socket with rest_auth/local, only the slurmctld plugins: the accounting
ones are fatal without slurmdbd, which the local cluster does not run (24.11 stops
with "Failure loading plugin path bindings" unless told `-s openapi/slurmctld`). As
root on every release: as any other user (nobody) 24.11 sends every request as that
user and slurmctld refuses the operator's hold/release ("Invalid user id").
Standard library only.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from slurm_gavel_dev import localcluster_chroot as chroot
from slurm_gavel_dev.localcluster_conf import ClusterError
from slurm_gavel_dev.localcluster_host import which_sbin
from slurm_gavel_dev.localcluster_state import log_tail, ours, read_state, running_daemons


def rest_up(run: Path) -> Path:
    """Start slurmrestd on DIR/slurmrestd.sock (rest_auth/local); returns the socket."""
    from slurm_gavel_dev import localcluster as lc  # (it imports this module)

    run = run.resolve()
    state = read_state(run)
    if not state or not lc.is_up(run):
        raise ClusterError(f"no cluster is up in {run}; run `tools/local-cluster up` first")
    sock = run / "slurmrestd.sock"
    if "slurmrestd" in running_daemons(run) and sock.exists():
        return sock
    sock.unlink(missing_ok=True)
    state["pids"].pop("slurmrestd", None)
    # slurmrestd refuses to run as root unless told this is deliberate: as a plain
    # user its requests would lack the operator rights the REST backend needs. 22.05
    # and 24.11 take disable_user_check (24.11 refuses root in become_user mode);
    # 26.05 refuses that and takes become_user (each request as the client's own
    # user, here root). The socket is only reachable by root (mode 0700 run dir).
    rel = chroot.release(state["spec"].get("slurm", chroot.HOST_RELEASE))
    security = {"SLURMRESTD_SECURITY": rel.rest_security}
    if rel.in_chroot:
        exe, plugins = "/usr/sbin/slurmrestd", "openapi/slurmctld"  # one for every version
    else:
        found = which_sbin("slurmrestd")
        if not found:
            raise ClusterError("slurmrestd is not installed; run tools/setup (as root)")
        exe, plugins = found, _rest_plugins(found, run, security)
    argv = [exe, "-f", str(run / "slurm.conf"), "-a", "rest_auth/local", "-s", plugins]
    lc._start(run, state, "slurmrestd", [*argv, f"unix:{sock}"], security)
    for _ in range(100):
        if sock.exists():
            return sock
        if not ours(state["pids"]["slurmrestd"], run):
            break
        time.sleep(0.1)
    raise ClusterError(f"slurmrestd did not open {sock}: {log_tail(run, 'slurmrestd')}")


def _rest_plugins(exe: str, run: Path, env: dict[str, str]) -> str:
    from slurm_gavel_dev import localcluster as lc

    res = subprocess.run(
        [exe, "-s", "list"],
        capture_output=True,
        text=True,
        env={**lc.slurm_env(run), **env},
        timeout=20,
    )
    names = [
        w for w in (res.stdout + res.stderr).split() if w.startswith("openapi/") and "/db" not in w
    ]
    if not names:
        raise ClusterError(f"slurmrestd -s list named no openapi plugin: {res.stderr.strip()}")
    return ",".join(names)
