"""Gavel's measurement window: stop once the window's jobs have all completed,
and report JCT metrics over those jobs only."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.simulated import parse_cluster_spec
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.throughputs import load_table

TABLE = load_table()
NODES = parse_cluster_spec("v100:1x4,p100:1x4,k80:1x4", TABLE)
JOBS = generate_trace(60, 900.0, TABLE, seed=3)


@pytest.mark.parametrize("policy", ["max_min_fairness", "slurm_fifo"])
def test_the_run_stops_once_the_named_jobs_have_completed(policy):
    full = simulate(JOBS, NODES, TABLE, policy, SimulationOptions(progress=False)).summary
    finish = {j: JOBS[int(j)].arrival_time + v for j, v in full["jct_s"].items()}
    ids = frozenset(sorted(finish, key=finish.__getitem__)[10:20])  # finish mid-run
    opts = SimulationOptions(progress=False, stop_when_completed=ids)
    early = simulate(JOBS, NODES, TABLE, policy, opts).summary
    assert ids <= early["jct_s"].keys()
    assert early["jobs"] < full["jobs"]
    # the jobs before the stop ran exactly as in the full run: stopping changes nothing
    for j in ids:
        assert early["jct_s"][j] == pytest.approx(full["jct_s"][j], rel=1e-9)
    last_finish = max(JOBS[int(j)].arrival_time + early["jct_s"][j] for j in ids)
    assert all(
        JOBS[int(j)].arrival_time + v <= last_finish + 1e-6 for j, v in early["jct_s"].items()
    )
