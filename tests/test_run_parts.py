"""tools/test's parts: every test runs in exactly one of them, and the xdist workers of
one run search disjoint port ranges for their clusters."""

from __future__ import annotations

import pytest
from run_parts import WORKER_PORT_STRIDE, in_this_part, rotated, worker_ports


@pytest.mark.parametrize("release", [None, "22.05", "26.05"])
def test_each_test_runs_in_exactly_one_part(release: str | None) -> None:
    only = {"SLURM_GAVEL_SLURM_ONLY": "1"}
    none = {"SLURM_GAVEL_SLURM_NONE": "1"}
    assert in_this_part(release, only) + in_this_part(release, none) == 1
    assert in_this_part(release, {})  # a plain run keeps everything
    assert in_this_part(release, only) == (release is not None)


def test_each_worker_searches_its_own_ports_and_moves_them_once() -> None:
    env = {"SLURM_GAVEL_PORT_START": "21000", "PYTEST_XDIST_WORKER": "gw1"}
    worker_ports(env)
    assert env["SLURM_GAVEL_PORT_START"] == str(21000 + WORKER_PORT_STRIDE)
    worker_ports(env)
    assert env["SLURM_GAVEL_PORT_START"] == str(21000 + WORKER_PORT_STRIDE)
    gw0 = {"SLURM_GAVEL_PORT_START": "21000", "PYTEST_XDIST_WORKER": "gw0"}
    worker_ports(gw0)
    assert gw0["SLURM_GAVEL_PORT_START"] == "21000"


@pytest.mark.parametrize("worker", ["", "master", "gw", "gwx", "gw-1"])
def test_a_process_that_is_no_numbered_worker_keeps_its_ports(worker: str) -> None:
    env = {"SLURM_GAVEL_PORT_START": "21000", "PYTEST_XDIST_WORKER": worker}
    worker_ports(env)
    assert env["SLURM_GAVEL_PORT_START"] == "21000" and "SLURM_GAVEL_PORT_WORKER" not in env


def test_the_default_start_moves_too() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw2"}
    worker_ports(env)
    assert env["SLURM_GAVEL_PORT_START"] == str(17000 + 2 * WORKER_PORT_STRIDE)


def test_each_release_begins_at_another_third_and_keeps_every_module_once() -> None:
    modules = [f"m{i}" for i in range(10)]
    orders = [rotated(modules, i, 3) for i in range(3)]
    assert [o[0] for o in orders] == ["m0", "m3", "m6"]
    for order in orders:
        assert sorted(order) == sorted(modules)
        start = modules.index(order[0])  # the cyclic order is kept
        assert order == modules[start:] + modules[:start]
    assert rotated(modules, 2, 1) == modules and rotated([], 1, 3) == []
