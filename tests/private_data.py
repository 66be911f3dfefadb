"""Slurm's PrivateData=jobs on the session's local cluster, for the length of a test:
the line appended to its slurm.conf and `scontrol reconfigure`d, then taken out again.

Imported as a plain module: pytest puts tests/ on sys.path (it is not a package).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from slurm_gavel.backends.slurm.cli.transport import cli_backend


def reconfigure(slurm: Any, want: str) -> None:
    """`scontrol reconfigure` and wait until scontrol reports PrivateData `want`."""
    slurm.cmd("scontrol", "reconfigure")
    cluster = cli_backend(env=slurm.env)
    deadline = time.monotonic() + 60
    while cluster.private_data() != want:
        assert time.monotonic() < deadline, f"PrivateData still {cluster.private_data()!r}"
        time.sleep(1)


@contextlib.contextmanager
def private_data_jobs(slurm: Any) -> Iterator[None]:
    conf = slurm.run_dir / "slurm.conf"
    before = conf.read_text()
    conf.write_text(before + "PrivateData=jobs\n")
    try:
        reconfigure(slurm, "jobs")
        yield
    finally:
        conf.write_text(before)
        reconfigure(slurm, "none")
