"""A local Slurm cluster of a test's own, up for the block and always taken down: the
session's cluster (conftest.py) and the modules that need another topology share it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from slurm_gavel_dev import localcluster
from slurm_gavel_dev.localcluster_conf import ClusterSpec


@contextmanager
def own_cluster(spec: ClusterSpec, prefix: str) -> Iterator[Path]:
    """The run directory of a cluster started from spec on free ports (readable by the
    plain users the tests submit as), removed with its daemons when the block ends."""
    run = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(run, 0o755)
    try:
        localcluster.up(spec, run, port_base_auto=True)
        yield run
    finally:
        localcluster.down(run)
        shutil.rmtree(run, ignore_errors=True)
