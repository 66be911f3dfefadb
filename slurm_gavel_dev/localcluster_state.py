"""The local cluster's record of itself (DIR/cluster.json) and its processes, by pid.

Every daemon `tools/local-cluster up` starts is recorded by pid; a pid counts as the
cluster's only while its command line still names the run dir (a recycled pid never
does). Standard library only (the docker images run tools/local-cluster without a venv).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

STATE_FILE = "cluster.json"


def read_state(run: Path) -> dict | None:
    path = run / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def save_state(run: Path, state: dict) -> None:
    tmp = run / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(run / STATE_FILE)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ours(pid: int, run: Path) -> bool:
    """The pid still runs a daemon of this cluster (not a recycled pid).

    A child this process spawned counts too: between fork and exec its command line
    is still this process's, without the run dir, and checking it then reported a
    slurmd that was only starting as "exited during start-up: (no log)" (seen in CI
    for the last node started, under load)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    if not alive(pid):
        return False
    return str(run) in cmd or parent_pid(pid) == os.getpid()


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # fields after "(comm)": state, ppid


def running_daemons(run: Path) -> dict[str, int]:
    state = read_state(run) or {}
    return {name: pid for name, pid in state.get("pids", {}).items() if ours(pid, run)}


def terminate(pids: list[int], run: Path, timeout: float = 10.0) -> None:
    """SIGTERM the cluster's pids, SIGKILL those still running after `timeout`."""
    for pid in pids:
        if ours(pid, run):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(ours(p, run) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if ours(pid, run):
            os.kill(pid, signal.SIGKILL)


def log_tail(run: Path, name: str, lines: int = 5) -> str:
    for path in (run / "log" / f"{name}.log", run / "log" / f"{name}.out"):
        if path.exists() and path.stat().st_size:
            return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"
