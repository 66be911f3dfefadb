"""One `make -C spank` at a time across test processes: tools/test runs several pytest
processes at once (one per Slurm release, each on two xdist workers), and two makes
writing the same spank/build/ files could hand a slurmd a half-written plugin."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = Path(__file__).resolve().parent.parent / "spank" / "build" / ".make.lock"


@contextmanager
def build_lock(path: Path = LOCK) -> Iterator[None]:
    """Hold an exclusive lock on path (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
