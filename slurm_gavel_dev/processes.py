"""Stopping a child process (a daemon the demo or a test started) the way systemd does:
SIGTERM, so it logs and saves what it must, then SIGKILL if it has not exited."""

from __future__ import annotations

import signal
import subprocess


def stop(p: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM ``p`` if it still runs, SIGKILL it when it has not exited after
    ``timeout`` seconds; it is reaped either way."""
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
