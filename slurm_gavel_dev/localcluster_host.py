"""Host side of the local Slurm cluster: installed binaries, munge, free ports.

Standard library only (the docker images run tools/local-cluster without a venv).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from slurm_gavel_dev.localcluster_conf import REPO, ClusterError


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def pick_port_base(count: int, start: int | None = None, stop: int | None = None) -> int:
    """First base port with `count` consecutive free ports (for --port-base auto).

    The search starts at SLURM_GAVEL_PORT_START (default 17000): test runs side by side
    (tools/test runs one per Slurm release) search disjoint ranges, so two clusters
    starting at the same moment cannot both find the same free ports. It ends at 30000,
    or 3000 ports past a start above that (a start of 33000 found nothing)."""
    if start is None:
        start = int(os.environ.get("SLURM_GAVEL_PORT_START", "17000"))
    if stop is None:
        stop = max(30000, start + 3000)
    base = start
    while base + count < stop:
        if all(port_free(base + i) for i in range(count)):
            return base
        base += count + 7
    raise ClusterError(f"no {count} consecutive free TCP ports in {start}-{stop}")


def ensure_munge() -> int | None:
    """Start munged when no daemon answers; returns its pid if this call started it.

    Clusters started at the same moment (tools/test starts one per release and worker)
    take turns under a lock: without it two saw no munged, both started one, and the
    second munged, finding the first's pid file locked, exited 1 and failed its cluster.
    """
    if _munge_works():
        return None
    munged = shutil.which("munged") or "/usr/sbin/munged"
    if not Path(munged).exists():
        raise ClusterError("munged is not installed; run tools/setup (as root)")
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    with open("/run/slurm-gavel-munge.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _munge_works():  # another cluster started it while this one waited
            return None
        started = subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", munged])
        for _ in range(50):
            if _munge_works():
                pidfile = Path("/run/munge/munged.pid")
                return int(pidfile.read_text()) if pidfile.exists() else None
            time.sleep(0.1)
    raise ClusterError(
        f"munged (exit {started.returncode}) started but `munge -n | unmunge` still "
        "fails; see syslog or /var/log/munge/munged.log"
    )


def _munge_works() -> bool:
    if not shutil.which("munge"):
        return False
    enc = subprocess.run(["munge", "-n"], capture_output=True)
    if enc.returncode != 0:
        return False
    dec = subprocess.run(["unmunge"], input=enc.stdout, capture_output=True)
    return dec.returncode == 0


def ensure_installed() -> None:
    missing = [b for b in ("slurmctld", "slurmd", "sinfo", "munged") if not which_sbin(b)]
    if not missing:
        return
    setup = REPO / "tools" / "setup"
    if os.geteuid() != 0:
        raise ClusterError(f"missing {' '.join(missing)}; run tools/setup as root")
    print(
        f"[local-cluster] installing Slurm and munge (missing: {' '.join(missing)})",
        file=sys.stderr,
    )
    if setup.exists():
        # The host's packages only: a chroot release is built by `up --slurm R` itself.
        env = {**os.environ, "SLURM_GAVEL_SLURM": "22.05"}
        subprocess.run(["bash", str(setup), "--slurm-only"], check=True, env=env)
    else:  # in a docker image without the repo's tools/
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            [
                "apt-get",
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "slurmctld",
                "slurmd",
                "slurm-client",
                "slurmrestd",
                "munge",
            ],
            check=True,
            env=env,
        )


def which_sbin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/local/sbin"):
        if Path(d, name).exists():
            return str(Path(d, name))
    return None
