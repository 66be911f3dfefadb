"""Running a job script as two gloo ranks in subprocesses, without Slurm.

Shared by tests/job/test_ranks.py and tests/job/test_sharded.py. Imported as a plain
module: pytest puts this folder on sys.path (tests/ is not a package).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    """A TCP port free on loopback now, for the ranks' rendezvous (MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def failed(rc: int) -> bool:
    """Exited with the error (1), not 0 or the requeue code. torch 2.13's gloo sometimes
    aborts a rank after its traceback, in C++ teardown once Python has finished
    ("terminate called without an active exception": -6), in about one exit of five
    on this machine even with the process group destroyed first; the error is the
    same, so that counts as failing too."""
    return rc in (1, -6, 134)


def clean_env() -> dict[str, str]:
    """This process's environment without Slurm's or the library's variables, so the
    ranks see only what the test gives them."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}


def run_two_ranks(script: Path, args: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start `script` once per rank with args[rank] after it (rank and port are the
    caller's to pass), wait for both and return their results."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), *rank_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        for rank_args in args
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out
