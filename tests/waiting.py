"""Polling until a condition holds, for tests that watch Slurm or a daemon.

Imported as a plain module: pytest puts tests/ on sys.path (it is not a package).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, poll: float = 0.1) -> T:
    """The first truthy value of predicate(), polled every `poll` seconds; an
    AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def returns_within(seconds: float, call: Callable[[], T], what: str) -> T:
    """What call() returns, run in a thread; an AssertionError naming `what` when it has
    not returned after `seconds` (it blocked) or raised."""
    got: list[T] = []
    t = threading.Thread(target=lambda: got.append(call()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{what} blocked for {seconds} s"
    assert got, f"{what} raised"
    return got[0]
