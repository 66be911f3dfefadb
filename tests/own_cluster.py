"""A local Slurm cluster of a test's own, up for the block and always taken down: the
session's cluster (conftest.py) and the modules that need another topology share it."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

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


def module_cluster(topology: str, prefix: str) -> tuple[Any, Any]:
    """Two fixtures for a module whose tests run on a cluster of their own:
    ``module_slurm`` (module scope), a cluster of the session's release and plugins
    with ``topology``; and ``slurm``, which overrides the session's cluster for the
    module's fixtures (``scenario``) with that one, cleared of jobs before and after
    each test. Assign both at module level:
    ``module_slurm, slurm = module_cluster(TOPOLOGY, "slurm-gavel-...-")``."""

    @pytest.fixture(scope="module", name="module_slurm")
    def cluster(slurm_session):
        spec = dataclasses.replace(slurm_session.spec, topology=topology)
        with own_cluster(spec, prefix) as run:
            yield type(slurm_session)(run, spec)

    @pytest.fixture(name="slurm")
    def slurm(module_slurm):
        module_slurm.cancel_all()
        yield module_slurm
        module_slurm.cancel_all()

    return cluster, slurm
