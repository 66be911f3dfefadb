"""Retry with exponential backoff: the one rule of every Slurm client here (the
commands of slurm/cli/commands.py, the --json documents of slurm/backend.py, slurmrestd's
requests in slurm/rest/client.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator


def attempts(retries: int, delay: float, sleep: Callable[[float], None]) -> Iterator[int]:
    """The attempt numbers 0, 1, ..., `retries`: before each one but the first, sleep
    `delay` seconds, twice as long each time (0.5, 1, 2, ... s by default). The caller
    returns (or breaks) from the loop when an attempt works and raises after it."""
    for attempt in range(retries + 1):
        if attempt:
            sleep(delay)
            delay *= 2
        yield attempt
