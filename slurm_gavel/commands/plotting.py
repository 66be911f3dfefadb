"""What the commands with --plot share: matplotlib is an extra (`[sim]`), absent on the
daemon's node, so its absence is a clear error rather than a traceback."""

from __future__ import annotations

from slurm_gavel.errors import InputError


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "--plot needs matplotlib, which is not installed: pip install 'slurm-gavel[sim]'"
        ) from None
