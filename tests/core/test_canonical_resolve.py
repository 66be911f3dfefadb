"""Cold against warm: every round of a trace computed twice, once from the state as the
rounds before left it (memo, row caches, moldable memory, the allocation's cached
candidates) and once from its reload through the daemon's JSON form, which has none of
them (scheduler_state.copy_state), against the same observation and the same act's
outcome. The placement and the whole state after the round must be identical: no
cache may change a result (docs/design.md, "Canonical re-solves").
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.moldable.moldable_settings import MoldableSettings
from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState, copy_state
from slurm_gavel.domain.cluster_model import ActResult, ClusterSnapshot, RoundPlacement
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate import moldable_trace
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.true_rows import complete_rows, draw_true_rows

TABLE = load_table()
SPEC = "v100:2x4,p100:2x4,k80:2x4"


class Recording:
    """The simulated cluster, remembering the round's observation and act."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self.sim = sim
        self.snap: ClusterSnapshot | None = None
        self.result: ActResult | None = None

    def observe(self) -> ClusterSnapshot:
        self.snap = self.sim.observe()
        return self.snap

    def act(self, placement: RoundPlacement) -> ActResult:
        self.result = self.sim.act(placement)
        return self.result


class Replay:
    """The same round again: the recorded observation, the recorded act's outcome."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec

    def observe(self) -> ClusterSnapshot:
        assert self.rec.snap is not None
        return self.rec.snap

    def act(self, placement: RoundPlacement) -> ActResult:
        assert self.rec.result is not None
        return self.rec.result


def _differences(
    policy: str,
    seed: int,
    rounds: int,
    *,
    spread: float | None = 0.3,
    noise: float = 0.0,
    moldable: bool = False,
    moldable_lp: bool = False,
    restart_aware: bool = False,
) -> tuple[list[int], int]:
    """The rounds whose warm and cold results differ, and the rounds that re-solved."""
    nodes = parse_cluster_spec(SPEC, TABLE)
    jobs = generate_trace(40, 1200.0, TABLE, seed=seed, multi_gpu=True)
    types = list(dict.fromkeys(n.gpu_type for n in nodes))
    truth = draw_true_rows(jobs, TABLE, types, spread, seed) if spread is not None else {}
    if moldable:
        jobs = moldable_trace.with_ranges(jobs, TABLE, 1.0, seed, True, 2)
    truth = complete_rows(jobs, truth, TABLE, types)
    settings = SIMULATOR_DEFAULTS
    sim = SimulatedCluster(
        nodes,
        jobs,
        TABLE,
        preemption_overhead_seconds=settings.preemption_overhead_seconds,
        true_rows=truth,
        measurement_noise=noise,
        seed=seed,
    )
    plugins = replace(
        SIMULATOR_PLUGINS,
        restart_aware=RestartAwareSettings(enabled=restart_aware),
        moldable_counts=MoldableSettings(lp=moldable_lp),
    )
    config = SchedulerConfig(
        table=TABLE,
        policy=policy,
        settings=settings,
        plugins=plugins,
        knowledge=Knowledge.LEARNED if truth else Knowledge.TABLE,
    )
    rec = Recording(sim)
    state = SchedulerState()
    differ: list[int] = []
    solved = 0
    for _ in range(rounds):
        if sim.done():
            break
        if sim.active_count() == 0:
            nxt = sim.next_arrival_time()
            if nxt is not None:
                sim.advance(max(sim.clock, nxt))
        cold = copy_state(state)
        state, warm_report = run_round(state, rec, config)
        cold, cold_report = run_round(cold, Replay(rec), config)
        solved += warm_report.reallocated
        warm_doc: dict[str, Any] = state.to_json()
        if warm_report.placement.jobs != cold_report.placement.jobs or json.dumps(
            warm_doc, sort_keys=True
        ) != json.dumps(cold.to_json(), sort_keys=True):
            differ.append(warm_report.round_index)
        sim.advance(sim.clock + settings.round_seconds)
        sim.completions.clear()
    return differ, solved


CASES = {
    "max-min, learned, noisy": dict(policy="max_min_fairness", noise=0.1),
    "finish-time fairness, moldable, learned": dict(policy="finish_time_fairness", moldable=True),
    "moldable LP": dict(policy="max_min_fairness", spread=None, moldable=True, moldable_lp=True),
    "restart-aware": dict(policy="max_min_fairness", restart_aware=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_warm_and_cold_rounds_agree(case):
    kw = dict(CASES[case])
    differ, solved = _differences(kw.pop("policy"), 1, 120, **kw)
    assert solved > 5  # rounds that re-solved, each compared cold
    assert differ == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_warm_and_cold_rounds_agree_over_seeds(case, seed):
    kw = dict(CASES[case])
    differ, _ = _differences(kw.pop("policy"), seed, 300, **kw)
    assert differ == []
