"""Stopping and restarting one node's slurmd of the local cluster, for the tests of
node outages. Imported as a plain module: pytest puts tests/ on sys.path."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from slurm_gavel_dev import localcluster


def stop_slurmd(slurm, node: str) -> list[str]:
    """SIGTERM one node's slurmd (by the pid the cluster recorded); its command line."""
    state = localcluster.read_state(slurm.run_dir)
    assert state is not None, slurm.run_dir
    pid = state["pids"][f"slurmd:{node}"]
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return argv


def _alive(pid: int) -> bool:
    """Running (a zombie is reaped when it is this process's child: the session
    fixture started the cluster's daemons)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def start_slurmd(slurm, node: str, argv: list[str]) -> None:
    """Start it again with the same command line, recorded like the cluster's own."""
    run = slurm.run_dir
    state = localcluster.read_state(run)
    assert state is not None, run
    localcluster._start(run, state, f"slurmd:{node}", argv)
