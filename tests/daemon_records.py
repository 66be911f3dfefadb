"""The daemon logger's records, for tests that check what the daemon logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def daemon_records(level: int = logging.DEBUG) -> Iterator[list[logging.LogRecord]]:
    """The daemon logger's records at ``level`` and above while the block runs. On the
    daemon's logger itself: the CLI's log set-up (run by other tests in the same
    process) stops propagation to the root logger, where caplog listens."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("slurm_gavel.daemon")
    saved = logger.level
    if logger.getEffectiveLevel() > level:  # lowered for the block, never raised
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
