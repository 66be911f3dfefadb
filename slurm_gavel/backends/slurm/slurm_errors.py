"""What every Slurm transport raises when Slurm cannot be reached (the daemon tells
an outage from a refusal by these; round_failures.py)."""

from __future__ import annotations


class SlurmUnreachable(RuntimeError):
    """slurmctld did not answer after every retry. last_error: the command's last line
    on stderr (or what else went wrong), for callers that word their own message."""

    def __init__(self, message: str, last_error: str = "") -> None:
        super().__init__(message)
        self.last_error = last_error


class SlurmActionTimedOut(SlurmUnreachable):
    """An action (hold, release, update, signal, requeue) got no answer in time.

    It may have half happened, so it is never retried; and a controller that does
    not answer one command will not answer the next, so the round stops here
    instead of firing the rest of its actions into the outage. The daemon rolls
    the round back and, once slurmctld answers again, reconciles its state with
    what Slurm reports (daemon.py), which is exact whichever half happened."""
