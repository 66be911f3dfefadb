"""How the daemon logs and counts a round that failed, by cause.

Every failure is one log event and one `slurm_gavel_round_errors_total{cause}` count;
the daemon never gives up on its own (the loop retries with a backoff). Which
errors are a Slurm outage, and which command failed, is decided here too
(is_slurm_unavailable, failed_command).
"""

from __future__ import annotations

import logging
import subprocess

from slurm_gavel.daemon.logs import event
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.state_store import StateSaveError
from slurm_gavel.errors import InputError, SolveError

log = logging.getLogger("slurm_gavel.daemon")


def is_slurm_unavailable(e: BaseException) -> bool:
    """True when `e` says Slurm could not be reached (slurmctld away, a command timed
    out): the round is retried and the daemon settles before it acts again."""
    from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable

    # Not every OSError: the backends turn their own (a missing command, a refused
    # connection) into SlurmUnreachable, so a bare OSError here is a local file (the
    # state, the spool) and must not be reported, or settled on, as a Slurm outage.
    return isinstance(
        e, SlurmUnreachable | subprocess.SubprocessError | TimeoutError | ConnectionError
    )


def failed_command(e: BaseException) -> str:
    """The Slurm command an error names first ("sinfo --json: ..." -> "sinfo")."""
    words = str(e).split()
    name = words[0].rstrip(":") if words else ""
    return name if name in ("sinfo", "squeue", "scontrol", "scancel") else "other"


def round_failed(metrics: DaemonMetrics, e: Exception) -> bool:
    """Log and count a round's exception; True when slurmctld was unreachable (the
    daemon then settles before it acts again: daemon/hooked_backend.py). Call it inside the
    `except` block: an internal error is logged with its traceback."""
    if isinstance(e, InputError):
        # bad throughput table entry, malformed state: needs a human, but keep going
        metrics.round_errors.labels(cause="input").inc()
        event(log, "round_failed", logging.ERROR, cause="input", error=str(e))
    elif isinstance(e, SolveError):
        metrics.round_errors.labels(cause="solver").inc()
        event(log, "round_failed", logging.ERROR, cause="solver", error=str(e))
    elif is_slurm_unavailable(e):
        metrics.round_errors.labels(cause="slurm_unavailable").inc()
        metrics.count_command_failures({failed_command(e): 1})
        event(log, "slurm_unavailable", logging.WARNING, error=f"{e}".strip()[:300])
        return True
    elif isinstance(e, OSError):
        # A local file the round read or wrote, not Slurm: name it, no settling.
        metrics.round_errors.labels(cause="io").inc()
        event(log, "round_failed", logging.ERROR, cause="io", error=str(e)[:300])
    else:
        metrics.round_errors.labels(cause="internal").inc()
        log.error("round failed", exc_info=True, extra={"event": "round_failed"})
    return False


def save_failed(
    metrics: DaemonMetrics, e: StateSaveError, round_index: int, acted: bool, failed_saves: int
) -> None:
    """A save failed (a full disk): error level, with the path and the cause.

    What the daemon does meanwhile (docs/admin-guide.md, section 11): it does not
    act without first saving the round's inflight record (the pre-round save),
    so while saves fail it observes and retries with the round backoff, and
    Slurm's jobs run on where they are. Pausing, not acting on in-memory state,
    because a daemon killed while it cannot save would restart from an older
    state.json and lose the accounting of everything it did since; the pause
    loses nothing: once a save succeeds, the time every job ran meanwhile is
    credited from what Slurm reports (the reconcile after a failed round)."""
    metrics.round_errors.labels(cause="state_save").inc()
    metrics.state_save_failures.inc()
    metrics.state_save_failing.set(1)
    event(
        log,
        "state_save_failed",
        logging.ERROR,
        round=round_index,
        acted=acted,
        failed_saves=failed_saves,
        error=str(e),
    )
