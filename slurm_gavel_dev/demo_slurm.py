"""The demo's Slurm commands (sbatch, squeue, scontrol, against the demo cluster's
slurm.conf) and what it reads back: job states, each job's outcome, the daemon's
round from its state file."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from datetime import datetime
from pathlib import Path

from slurm_gavel_dev import demo_report as rep
from slurm_gavel_dev.demo_report import Outcome

REPO = Path(__file__).resolve().parents[1]
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED", "GONE"}  # fmt: skip


def say(msg: str = "") -> None:
    print(msg, flush=True)


class DemoSlurm:
    """Slurm commands run with ``env`` (the demo cluster's SLURM_CONF)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def cmd(
        self, *argv: str, env: dict[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env or self.env,
            timeout=60,
            check=check,
        )

    def sbatch(self, argv: list[str], env: dict[str, str]) -> str:
        res = self.cmd("sbatch", "--parsable", *argv, env=env, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(argv)}: {res.stderr.strip()}")
        return res.stdout.strip().split(";")[0]

    def squeue(self, ids: list[str]) -> dict[str, tuple[str, str]] | None:
        """job id -> (state, node list); GONE when Slurm no longer lists it; None when
        squeue failed (a busy slurmctld: ask again, never read it as "all gone")."""
        try:
            res = self.cmd(
                "squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T %N", check=False
            )
        except subprocess.TimeoutExpired:
            return None
        if res.returncode != 0:
            return None
        got: dict[str, tuple[str, str]] = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2:
                got[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
        return {j: got.get(j, ("GONE", "")) for j in ids}

    def wait_idle(self, timeout: float = 60.0) -> None:
        """No job left running or completing: the next phase starts on an empty cluster."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.cmd(
                "squeue", "-h", "-t", "running,completing,configuring", "-o", "%i", check=False
            )
            if res.returncode == 0 and not res.stdout.strip():
                return
            time.sleep(1.0)
        raise RuntimeError(f"jobs still running after {timeout:.0f} s: {res.stdout.split()}")

    def outcome(self, job_id: str, submitted: float, seen_end: float | None, out: Path) -> Outcome:
        info = self.cmd("scontrol", "show", "job", "--oneliner", job_id, check=False).stdout
        fields: dict[str, str] = {}
        for tok in info.split():
            k, _, v = tok.partition("=")
            fields.setdefault(k, v)
        ended = seen_end
        with contextlib.suppress(ValueError, KeyError):
            ended = datetime.fromisoformat(fields["EndTime"]).timestamp()
        text = out.read_text(errors="replace") if out.exists() else ""
        return Outcome(
            job_id,
            fields.get("JobState", "GONE"),
            submitted,
            ended,
            int(fields.get("Restarts", "0") or 0),
            rep.parse_output(text),
        )


def daemon_round(state_file: Path) -> tuple[int | None, dict[str, str], dict[str, int]]:
    """(the daemon's last round, job id -> GPU type it placed the job on, job id -> its
    GPUs there)."""
    try:
        doc = json.loads(state_file.read_text())
    except (OSError, json.JSONDecodeError):
        return None, {}, {}
    placed, counts = {}, {}
    for j, v in (doc.get("jobs") or {}).items():
        if v.get("state") in ("running", "starting") and v.get("gpu_type"):
            placed[j] = v["gpu_type"]
            counts[j] = sum(int(g) for _, g in v.get("nodes") or []) or 1
    return int((doc.get("scheduler") or {}).get("round_index") or 0), placed, counts
