"""The parts tools/test's full run is made of, side by side: each release's Slurm tests
in a run of their own (SLURM_GAVEL_SLURM_ONLY=1), every other test in one more
(SLURM_GAVEL_SLURM_NONE=1), each run on pytest-xdist workers. The root conftest asks
which tests a run keeps, and moves each worker's ports apart."""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence
from typing import TypeVar

T = TypeVar("T")

# The ports each xdist worker's clusters search from, past its run's start: the workers
# of one run start their clusters at the same moments, and two searches from one start
# could find the same free ports. 1000 ports hold every cluster a worker starts (each
# takes about a dozen); tools/test gives each run 4000.
WORKER_PORT_STRIDE = 1000


def in_this_part(release: str | None, env: MutableMapping[str, str] = os.environ) -> bool:
    """Whether this run keeps a test of that release (None: not a release's Slurm test,
    i.e. not run once per release by the session clusters' parameter)."""
    if release is None:
        return env.get("SLURM_GAVEL_SLURM_ONLY") != "1"
    return env.get("SLURM_GAVEL_SLURM_NONE") != "1"


def worker_ports(env: MutableMapping[str, str] = os.environ) -> None:
    """Move SLURM_GAVEL_PORT_START by the xdist worker's number (gw0, gw1...), in this
    process's environment, so the clusters and tools it starts inherit it; once."""
    worker = env.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return
    if env.get("SLURM_GAVEL_PORT_WORKER") == worker:
        return  # moved already (a second configure in this process)
    start = int(env.get("SLURM_GAVEL_PORT_START", "17000"))
    env["SLURM_GAVEL_PORT_START"] = str(start + WORKER_PORT_STRIDE * int(worker[2:]))
    env["SLURM_GAVEL_PORT_WORKER"] = worker


def rotated(modules: Sequence[T], index: int, count: int) -> list[T]:
    """The modules in their order, begun at the index-th of count equal parts: each
    release's run (tools/test runs them side by side) begins elsewhere in the list, so
    that the heavy scenarios (daemons, slurmctld restarts, node outages) of the three
    releases do not all run in the same minutes; the same order once for one release."""
    if count <= 1 or not modules:
        return list(modules)
    start = (len(modules) * (index % count)) // count
    return [*modules[start:], *modules[:start]]
