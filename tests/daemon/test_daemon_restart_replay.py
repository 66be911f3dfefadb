"""A daemon stopped and started again from its state file every few rounds decides,
round for round, what a daemon that kept running decides (docs/design.md, "Canonical
re-solves"): the daemon's own save, load and reconcile, on a simulated cluster with a
generated trace, learned own rows, restart-aware rounds and moldable jobs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_daemon import config

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate import moldable_trace
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.true_rows import complete_rows, draw_true_rows

TABLE = load_table()
SPEC = "v100:2x4,p100:2x4,k80:2x4"
ROUND = 360.0


def _sim(seed: int) -> SimulatedCluster:
    nodes = parse_cluster_spec(SPEC, TABLE)
    jobs = generate_trace(30, 900.0, TABLE, seed=seed, multi_gpu=True)
    types = list(dict.fromkeys(n.gpu_type for n in nodes))
    truth = complete_rows(jobs, draw_true_rows(jobs, TABLE, types, 0.3, seed), TABLE, types)
    jobs = moldable_trace.with_ranges(jobs, TABLE, 0.5, seed, True, 2)
    return SimulatedCluster(nodes, jobs, TABLE, preemption_overhead_seconds=30.0,
                            true_rows=truth, measurement_noise=0.1, seed=seed)  # fmt: skip


def _daemon(tmp_path, sim: SimulatedCluster, lp: bool) -> Daemon:
    cfg = config(tmp_path, policy="max_min_fairness", round_seconds=ROUND,
                 restart_aware=True, moldable_lp=lp)  # fmt: skip
    d = Daemon(cfg, sim, table=TABLE, metrics=DaemonMetrics())
    d.start()
    return d


def _rounds(tmp_path, seed: int, lp: bool, n: int, restart_every: int) -> list[Any]:
    sim = _sim(seed)
    d = _daemon(tmp_path, sim, lp)
    out = []
    for i in range(n):
        if restart_every and i and i % restart_every == 0:
            d.store.release()
            d = _daemon(tmp_path, sim, lp)  # a new process: only the state file carries over
        report = d.round()
        alloc = d.state.allocation
        out.append((
            report.round_index,
            report.reallocated,
            None if alloc is None else json.dumps(alloc.fractions, sort_keys=True),
            sorted((j, p.to_json()) for j, p in report.placement.jobs.items()),
        ))  # fmt: skip
        sim.advance(sim.clock + ROUND)
    d.store.release()
    return out


@pytest.mark.parametrize("seed", [1, 3])
@pytest.mark.parametrize("lp", [False, True], ids=["least-first", "moldable LP"])
def test_a_restarted_daemon_decides_round_for_round_as_one_that_kept_running(tmp_path, lp, seed):
    kept = _rounds(tmp_path / "kept", seed, lp, 40, 0)
    restarted = _rounds(tmp_path / "restarted", seed, lp, 40, 3)
    assert sum(r[1] for r in kept) > 5  # rounds that re-solved
    for a, b in zip(kept, restarted, strict=True):
        assert a == b, f"round {a[0]}"
