"""The checkpoint signal to an array task, sent once.

`scancel --signal=USR1 --batch 28_1` on a running task of an array that still has
pending tasks delivers the signal, and slurmctld answers "Job can not be altered now,
try again later" all the same (22.05 and 26.05: job_str_signal goes on to the
array's pending meta record; naming the task's own job id does the same, scancel
turns it into 28_1). scancel then retries every 5 s, sending the signal again each
time, without end: the round's signal thread hung until the command's timeout, the
round was skipped as slurmctld "not answering", and the task got the checkpoint signal
again and again. So each task gets its own scancel (-v), which is stopped at its
first answer: its "transitional state, retrying" line means slurmctld took the signal
(the task's batch shell got it, once, as measured); an exit is read as scancel's own
answer. No shell; argv only; the task's id is ARRAY_TASK, digits and one "_".
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping

from slurm_gavel.domain.model import JobId

RETRYING = "transitional state, retrying"
TIMEOUT_S = 30.0


def signal_task(job_id: JobId, signal: str, env: Mapping[str, str]) -> str | None:
    """Send `signal` to one array task's batch shell, once; None when sent, else why."""
    argv = ["scancel", "-v", f"--signal={signal}", "--batch", job_id]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=dict(env),
        )
    except FileNotFoundError:
        return "scancel is not installed or not on PATH"
    assert proc.stderr is not None
    late = f"scancel did not answer within {TIMEOUT_S:.0f}s"
    watchdog = threading.Timer(TIMEOUT_S, proc.kill)  # a silent scancel ends too
    watchdog.start()
    errors: list[str] = []
    try:
        for line in proc.stderr:  # scancel -v writes its steps, then exits or retries
            if RETRYING in line:
                return None  # slurmctld took it; a retry would signal the task again
            if "error" in line.lower():
                errors.append(line.strip())
        proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return late
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode < 0:  # the watchdog's kill
        return late
    if proc.returncode != 0 or errors:
        return "; ".join(errors) or f"scancel exited {proc.returncode}"
    return None
