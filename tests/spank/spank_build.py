"""Build the SPANK plugin once per test session (shared by this folder's conftest and tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from build_lock import build_lock

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "spank" / "build" / "slurm-gavel.so"
TYPES = REPO / "spank" / "build" / "job-types.txt"
BUILD_ERROR: str | None = None


def build_plugin() -> str | None:
    """Run `make -C spank`; returns an error text, or None when built."""
    try:
        with build_lock():
            res = subprocess.run(
                ["make", "-C", str(REPO / "spank")], capture_output=True, text=True, timeout=120
            )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"make -C spank: {e}"
    return None if res.returncode == 0 else f"make -C spank failed:\n{res.stderr[-2000:]}"


def ensure_built() -> str | None:
    """Build once; the error text (None when built) is remembered."""
    global BUILD_ERROR, _BUILT
    if not _BUILT:
        BUILD_ERROR = build_plugin()
        _BUILT = True
    return BUILD_ERROR


_BUILT = False
