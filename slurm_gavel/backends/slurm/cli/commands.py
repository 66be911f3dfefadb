"""Running Slurm's commands: argument lists only, timeouts, retries, and a count.

Every Slurm command the backends issue goes through :class:`SlurmCommands.run`:
no shell is ever involved (job comments and names are user text), each call has
a timeout, calls that fail because slurmctld is unreachable are retried with
exponential backoff, and every attempt is counted per action kind so the
daemon can report Slurm commands per round.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_gavel.backends.slurm.retry import attempts
from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut, SlurmUnreachable
from slurm_gavel.domain.model import JobId

# stderr of a command that could not talk to slurmctld: retried while it lasts.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Communication connection failure|"
    r"Slurm backup controller in standby mode|Transport endpoint is not connected",
    re.IGNORECASE,
)
# Of those, the ones where the request may have reached slurmctld and only the reply was
# lost (its MessageTimeout passed, or the connection broke after sending): like a timeout
# of our own, an action that fails this way may have half happened, so it is never sent
# again (a second `scancel --signal` would deliver the checkpoint signal twice).
_REPLY_LOST = re.compile(
    r"Socket timed out|Zero Bytes were transmitted|Communication connection failure|"
    r"Transport endpoint is not connected",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


# Prefixes of the environment variables the Slurm clients take their defaults from.
CLIENT_DEFAULTS = ("SQUEUE_", "SINFO_")


class SlurmCommands:
    """Runs sinfo/squeue/scontrol/scancel for one cluster (SLURM_CONF via `env`)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Times in text output as epoch seconds, whatever the caller's environment sets:
        # the job listing builds jobs from them (slurm/cli/jobs_from_text.py). squeue's and
        # sinfo's defaults from the environment (SQUEUE_USERS, SQUEUE_FORMAT, which
        # beats the listing's SQUEUE_FORMAT2, SINFO_SORT...) are an admin's shell
        # settings: dropped, so they cannot hide jobs or reshape what the daemon parses.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(CLIENT_DEFAULTS)}
        self.env = {**inherited, **(env or {}), "SLURM_TIME_FORMAT": "%s"}
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep
        self.counts: Counter[str] = Counter()  # kind -> commands run (attempts)
        # kind -> wall seconds spent in them
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self._tally = threading.Lock()  # the act signals from a second thread

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def run(
        self,
        kind: str,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        retry_timeouts: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run `argv` (counted under `kind`), with `env` added to the commands'
        environment; retry while slurmctld is unreachable.

        A timeout is retried only when `retry_timeouts` (read-only commands): an
        action that timed out may have half happened, so it raises
        SlurmActionTimedOut at once (see there)."""
        last = ""
        for _ in attempts(self.retries, self.backoff, self.sleep):
            with self._tally:
                self.counts[kind] += 1
            started = time.perf_counter()
            try:
                proc = subprocess.run(
                    list(argv),
                    input=stdin,
                    capture_output=True,
                    text=True,
                    # User text (a job's comment) may be any bytes: squeue prints them
                    # raw, in its JSON too, and one invalid UTF-8 byte must not fail
                    # every observe (kept as surrogates, never written back to Slurm).
                    encoding="utf-8",
                    errors="surrogateescape",
                    env={**self.env, **env} if env else self.env,
                    timeout=self.timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                proc = None
                last = f"timed out after {self.timeout:.0f}s"
                if not retry_timeouts:  # (the finally below adds the seconds)
                    raise SlurmActionTimedOut(
                        f"{' '.join(argv[:2])}: {last} (it may have half happened): "
                        "slurmctld is not answering; this round's remaining actions are "
                        "skipped and the next round starts from what Slurm reports"
                    ) from None
            except FileNotFoundError:
                raise SlurmUnreachable(
                    f"{argv[0]} is not installed or not on PATH; install the Slurm client "
                    "(tools/setup)"
                ) from None
            finally:
                with self._tally:
                    self.seconds[kind] += time.perf_counter() - started
            if proc is not None:
                result = CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
                if result.ok or not _UNREACHABLE.search(proc.stderr):
                    return result
                last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
                if not retry_timeouts and _REPLY_LOST.search(proc.stderr):
                    raise SlurmActionTimedOut(
                        f"{' '.join(argv[:2])}: {last} (it may have half happened): "
                        "slurmctld did not answer in time; this round's remaining actions "
                        "are skipped and the next round starts from what Slurm reports"
                    )
        raise SlurmUnreachable(
            f"{' '.join(argv[:2])}: slurmctld unreachable after {self.retries + 1} tries "
            f"({last}); is slurmctld running and SLURM_CONF right?",
            last_error=last,
        )


# An array task's id is ARRAY_TASK ("28_2", arrays.py): its error is its own, never
# the array's or another job's.
_JOB_IN_ERROR = re.compile(r"(?:job(?:\s*id)?|JobId=)\s*[= ]?\s*(\d+(?:_\d+)?)", re.IGNORECASE)


def errors_by_job(stderr: str) -> tuple[dict[str, str], list[str]]:
    """Split a batched command's stderr into per-job errors and the rest."""
    per_job: dict[str, str] = {}
    other: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if not line or (line.startswith("scontrol:") and "error" not in line.lower()):
            continue
        m = _JOB_IN_ERROR.search(line)
        if m:
            per_job.setdefault(m.group(1), line)
        else:
            other.append(line)
    return per_job, other


def errors_only(res: CommandResult) -> CommandResult:
    """A verbose command's result with only its error lines (scancel -v also prints
    its plugins and each job it signalled)."""
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln.lower()]
    return replace(res, stderr="\n".join(lines))


def note_errors(
    res: CommandResult,
    ids: list[JobId],
    failed: dict[JobId, str],
    *,
    check_rc: bool = True,
    ignore: tuple[str, ...] = (),
) -> set[JobId]:
    """Record per-job errors of a batched command; an unattributable error fails all."""
    per_job, other = errors_by_job(res.stderr)
    bad: set[JobId] = set()
    for j in ids:
        msg = per_job.get(j)
        if msg and not any(s in msg.lower() for s in ignore):
            failed[j] = msg
            bad.add(j)
    other = [o for o in other if not any(s in o.lower() for s in ignore)]
    if (other or (check_rc and not res.ok and not per_job)) and not bad:
        reason = "; ".join(other) or f"{res.argv[0]} exited {res.returncode}"
        for j in ids:
            failed.setdefault(j, reason)
            bad.add(j)
    return bad
