"""Helpers for end-to-end tests of `slurm-gavel run` on the real local Slurm cluster.

The daemon runs as its own process (`python -m slurm_gavel run`), exactly as an
admin runs it, with JSON logs to a file. Training jobs are short bash batch
scripts that behave like the job-side contract asks: trap the checkpoint signal,
write a checkpoint, exit 99 (RequeueExitHold), and resume from the checkpoint
when Slurm restarts them. Each writes its life to a log the tests read back:

    <epoch> start <restart count> <node> <step>
    <epoch> signal <step>
    <epoch> done
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slurm_gavel_dev import processes

# Sleep in the background and `wait`, so a trapped signal is handled at once.
MANAGED_JOB = r"""#!/bin/bash
log="$1/$SLURM_JOB_ID.log"; ckpt="$1/$SLURM_JOB_ID.ckpt"; steps="$2"
step=0
[ -f "$ckpt" ] && step=$(cat "$ckpt")
# A signal after the last step (the daemon preempting as the job ends) is ignored, as
# slurm_gavel.job does: the work is done, so the job finishes rather than exit for requeue.
on_signal() {
  [ "$step" -ge "$steps" ] && return
  echo "$step" > "$ckpt"; echo "$(date +%s.%N) signal $step" >> "$log"; exit 99
}
trap on_signal USR1
echo "$(date +%s.%N) start ${SLURM_RESTART_COUNT:-0} $SLURMD_NODENAME $step" >> "$log"
while [ "$step" -lt "$steps" ]; do
  sleep 1 & wait $!
  step=$((step + 1))
done
echo "$(date +%s.%N) done" >> "$log"
"""

# A job that did not opt in: it only records whether anyone signalled it.
UNMANAGED_JOB = r"""#!/bin/bash
log="$1/$SLURM_JOB_ID.log"
trap 'echo "$(date +%s.%N) signal" >> "$log"' USR1
echo "$(date +%s.%N) start ${SLURM_RESTART_COUNT:-0} $SLURMD_NODENAME 0" >> "$log"
for _ in $(seq "$2"); do sleep 1 & wait $!; done
echo "$(date +%s.%N) done" >> "$log"
"""

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED", "GONE"}  # fmt: skip


@dataclass
class Segment:
    """One run of a job: from a start line to its signal/done line (or none)."""

    start: float
    node: str
    restart: int
    end: float | None = None
    how: str | None = None  # "signal" | "done" | None (still running, or killed)
    first_step: int = -1  # the step it resumed from (its start line)
    last_step: int = -1  # the step it checkpointed (its signal line)

    @property
    def gpu_type(self) -> str:
        return self.node.split("-")[0]


def read_job_log(path: Path) -> list[Segment]:
    segs: list[Segment] = []
    if not path.exists():
        return segs
    for line in path.read_text().splitlines():
        parts = line.split()
        t, what = float(parts[0]), parts[1]
        if what == "start":
            step = int(parts[4]) if len(parts) > 4 else -1
            segs.append(Segment(start=t, restart=int(parts[2]), node=parts[3], first_step=step))
        elif segs and segs[-1].how is None:
            segs[-1].end, segs[-1].how = t, what
            if what == "signal" and len(parts) > 2:
                segs[-1].last_step = int(parts[2])
        else:  # signal/done with no open segment: record it, the test will fail on it
            segs.append(Segment(start=t, node="?-?", restart=-1, end=t, how=f"orphan-{what}"))
    return segs


@dataclass
class DaemonProcess:
    """`slurm-gavel run` as a child process, with JSON logs in a file."""

    config: Path
    env: dict[str, str]
    log_path: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "slurm_gavel", "run", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        self.procs.append(p)
        return p

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.procs[-1]

    def kill(self) -> None:
        """SIGKILL: no handler, no final save."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int | None:
        for p in self.procs:
            processes.stop(p)
        return self.proc.returncode if self.procs else None

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        out = []
        if not self.log_path.exists():
            return out
        for line in self.log_path.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                e = {"event": "non_json", "line": line}
            if name is None or e.get("event") == name:
                out.append(e)
        return out


@dataclass
class Scenario:
    """One end-to-end run: a config, a daemon, job scripts and their logs."""

    slurm: Any  # tests/conftest.py's LocalSlurm
    dir: Path
    daemon: DaemonProcess
    metrics_port: int = 0
    managed: dict[str, str] = field(default_factory=dict)  # job id -> job type
    unmanaged: list[str] = field(default_factory=list)

    @property
    def state_file(self) -> Path:
        return self.dir / "state" / "state.json"

    def submit(self, job_type: str, steps: int, scale: int = 1, account: str = "") -> str:
        job_id = self.slurm.sbatch(
            "-p", "gpu", "-o", "/dev/null", f"--comment=gavel:type={job_type},scale={scale}",
            *(["-A", account] if account else []),
            str(self.dir / "managed.sh"), str(self.dir / "logs"), str(steps),
        )  # fmt: skip
        self.managed[job_id] = job_type
        return job_id

    def submit_unmanaged(self, gres: str, seconds: int) -> str:
        job_id = self.slurm.sbatch(
            "-p", "gpu", "-o", "/dev/null", f"--gres={gres}",
            str(self.dir / "unmanaged.sh"), str(self.dir / "logs"), str(seconds),
        )  # fmt: skip
        self.unmanaged.append(job_id)
        return job_id

    def segments(self, job_id: str) -> list[Segment]:
        return read_job_log(self.dir / "logs" / f"{job_id}.log")

    def states(self, ids: list[str]) -> dict[str, str]:
        res = self.slurm.cmd("squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T",
                             check=False)  # fmt: skip
        got = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        return {j: got.get(j, "GONE") for j in ids}

    def wait_finished(self, ids: list[str], timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.states(ids)
            if all(s in FINISHED for s in states.values()):
                return states
            if self.daemon.procs and self.daemon.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited ({self.daemon.proc.returncode}); "
                    f"log tail: {self.daemon.log_path.read_text()[-2000:]}"
                )
            time.sleep(1)
        raise AssertionError(f"jobs not finished after {timeout:.0f}s: {states}")

    def assert_all_completed(self, states: dict[str, str]) -> None:
        """Every job COMPLETED; else say why for each one that did not: a CI failure
        here has to be diagnosable from its output alone (the run dir is gone)."""
        bad = {j: s for j, s in states.items() if s != "COMPLETED"}
        if not bad:
            return
        parts = []
        for job_id, state in sorted(bad.items()):
            fields = self.slurm.why(job_id)
            log = self.dir / "logs" / f"{job_id}.log"
            job_log = log.read_text() if log.exists() else "(no job log)"
            mention = re.compile(rf"(?<![\d.]){job_id}(?![\d.])")
            daemon = [
                line
                for line in self.daemon.log_path.read_text().splitlines()
                if mention.search(line)
            ][-15:]
            parts.append(
                f"job {job_id} {state} ({fields})\n-- its log:\n{job_log}"
                f"-- Slurm:\n{self.slurm.log_lines(job_id)}\n-- daemon:\n" + "\n".join(daemon)
            )
        raise AssertionError(f"not all COMPLETED: {states}\n" + "\n\n".join(parts))

    def state_doc(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def metrics(self) -> dict[str, float]:
        """The daemon's /metrics as {'name{labels}': value}."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def status(self) -> dict[str, Any]:
        res = subprocess.run(
            [sys.executable, "-m", "slurm_gavel", "status", "--config", str(self.daemon.config),
             "--json"], capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        return json.loads(res.stdout)


@pytest.fixture
def scenario(slurm, tmp_path: Path):
    """A fresh state dir, job scripts and a (not yet started) daemon; stopped afterwards."""
    sc = new_scenario(slurm, tmp_path)
    yield sc
    sc.daemon.stop()


def new_scenario(slurm, tmp_path: Path) -> Scenario:
    """A scenario on this cluster (its daemon not started; the caller stops it)."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "managed.sh").write_text(MANAGED_JOB)
    (tmp_path / "unmanaged.sh").write_text(UNMANAGED_JOB)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text(
        "policy: max_min_fairness\n"
        "round_seconds: 4\n"
        "partitions: [gpu]\n"
        "checkpoint: {signal: USR1, grace_seconds: 3}\n"
        f"state_dir: {tmp_path / 'state'}\n"
        "log_format: json\n"
        f"metrics_port: {metrics_port}\n"
        # Short command timeouts so a stopped slurmctld fails rounds (and exercises the
        # daemon's own backoff) instead of every command quietly waiting it out.
        "slurm: {command_timeout_seconds: 4, retry_initial_seconds: 0.5, "
        "retry_max_seconds: 2}\n"
    )
    daemon = DaemonProcess(cfg, slurm.env, tmp_path / "daemon.log")
    return Scenario(slurm, tmp_path, daemon, metrics_port=metrics_port)
