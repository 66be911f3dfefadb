"""A scheduler restarted mid-trace from its saved state computes exactly what one that
kept running computes (docs/design.md, "Canonical re-solves").

Each case runs a generated trace straight through, and again with the scheduler's state
put through the daemon's JSON form (scheduler_state.copy_state: to_json, JSON text,
from_json) before every round or every few rounds (SimulationOptions.
reload_state_every): no memo, row cache, moldable memory's derived parts or solver
object survives a reload. Every round's allocation (exact fractions), whether it
re-solved, the placement carried out, and the summary must be identical.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.learned_rows.learned_rows_settings import LearnedRowsSettings
from slurm_gavel.core.moldable.moldable_settings import MoldableSettings
from slurm_gavel.core.plugin_settings import SIMULATOR_PLUGINS
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import SIMULATOR_DEFAULTS
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.policies import policy_names
from slurm_gavel.simulate import engine, moldable_trace
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.slurm_baseline import BASELINES
from slurm_gavel.simulate.true_rows import draw_true_rows

TABLE = load_table()
SPEC = "v100:2x4,p100:2x4,k80:2x4"


def _run(
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
    seed: int,
    every: int,
    *,
    jobs: int = 40,
    spread: float | None = None,
    noise: float = 0.0,
    restart_aware: bool = False,
    moldable: bool = False,
    moldable_lp: bool = False,
    bounds: bool = True,
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """The summary and, per round, (index, time, re-solved, allocation, placement)."""
    nodes = parse_cluster_spec(SPEC, TABLE)
    trace = generate_trace(jobs, 1200.0, TABLE, seed=seed, multi_gpu=True)
    types = list(dict.fromkeys(n.gpu_type for n in nodes))
    true_rows = draw_true_rows(trace, TABLE, types, spread, seed) if spread is not None else {}
    if moldable:
        trace = moldable_trace.with_ranges(trace, TABLE, 1.0, seed, True, 2)
    plugins = replace(
        SIMULATOR_PLUGINS,
        restart_aware=RestartAwareSettings(enabled=restart_aware),
        moldable_counts=MoldableSettings(lp=moldable_lp),
        learned_rows=SIMULATOR_PLUGINS.learned_rows if bounds else LearnedRowsSettings(bounds=None),
    )
    settings = SIMULATOR_DEFAULTS
    if restart_aware:
        settings = replace(settings, preemption_overhead_seconds=60.0)
    opts = SimulationOptions(
        settings=settings,
        plugins=plugins,
        seed=seed,
        record_wall_time=False,
        progress=False,
        knowledge=Knowledge.LEARNED,
        measurement_noise=noise,
        startup_seconds=30.0 if noise else 0.0,
        reload_state_every=every,
    )
    rounds: list[tuple[Any, ...]] = []
    real = engine.run_round

    def recorded(state: SchedulerState, *args: Any, **kwargs: Any) -> Any:
        state, report = real(state, *args, **kwargs)
        alloc = state.allocation
        rounds.append(
            (
                report.round_index,
                report.time,
                report.reallocated,
                None if alloc is None else json.dumps(alloc.fractions, sort_keys=True),
                sorted((j, p.to_json()) for j, p in report.placement.jobs.items()),
            )
        )
        return state, report

    monkeypatch.setattr(engine, "run_round", recorded)
    res = simulate(trace, nodes, TABLE, policy, opts, true_rows)
    monkeypatch.setattr(engine, "run_round", real)
    return res.summary, rounds


def _same(monkeypatch: pytest.MonkeyPatch, policy: str, seed: int, every: int, **kw: Any) -> None:
    straight, rounds = _run(monkeypatch, policy, seed, 0, **kw)
    reloaded, rounds_r = _run(monkeypatch, policy, seed, every, **kw)
    assert len(rounds) > 20  # a trace with something to decide
    for a, b in zip(rounds, rounds_r, strict=True):
        assert a == b, f"round {a[0]} differs after reloads every {every} rounds"
    assert json.dumps(straight, sort_keys=True) == json.dumps(reloaded, sort_keys=True)


# One case per feature in the edit loop's tier; every reload and two seeds each below.
CASES = {
    "max-min, own rows, learned, noisy": dict(policy="max_min_fairness", spread=0.3, noise=0.1),
    "finish-time fairness, own rows": dict(policy="finish_time_fairness", spread=0.3),
    "restart-aware": dict(policy="max_min_fairness", restart_aware=True, spread=0.3),
    "moldable, learned": dict(policy="finish_time_fairness", spread=0.3, moldable=True),
    "moldable LP": dict(policy="max_min_fairness", moldable=True, moldable_lp=True),
    "packed": dict(policy="max_min_fairness_packed", spread=0.3),
    "learned rows without bounds": dict(policy="fifo", spread=0.3, bounds=False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_restarted_scheduler_computes_what_one_that_kept_running_computes(monkeypatch, case):
    kw = dict(CASES[case])
    _same(monkeypatch, kw.pop("policy"), 1, 5, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_a_reload_before_every_round_changes_nothing(monkeypatch, case, seed):
    kw = dict(CASES[case])
    _same(monkeypatch, kw.pop("policy"), seed, 1, jobs=60, **kw)


def test_the_reload_option_reloads(monkeypatch):
    """The option is not a no-op: the reloaded run's rounds see states with no memo."""
    memos: list[bool] = []
    real = engine.run_round

    def spy(state: SchedulerState, *args: Any, **kwargs: Any) -> Any:
        memos.append(state.caches.memo is not None)
        return real(state, *args, **kwargs)

    monkeypatch.setattr(engine, "run_round", spy)
    nodes = parse_cluster_spec(SPEC, TABLE)
    trace = generate_trace(20, 1200.0, TABLE, seed=3)
    opts = SimulationOptions(record_wall_time=False, progress=False, reload_state_every=3)
    simulate(trace, nodes, TABLE, "max_min_fairness", opts)
    assert len(memos) > 9
    assert not any(memos[i] for i in range(3, len(memos), 3))
    assert all(memos[i] for i in range(1, len(memos)) if i % 3)


@pytest.mark.slow
@pytest.mark.parametrize("policy", [*policy_names(), *BASELINES])
def test_every_policy_replays_through_a_reload_before_every_round(policy):
    nodes = parse_cluster_spec(SPEC, TABLE)
    trace = generate_trace(40, 1200.0, TABLE, seed=4, multi_gpu=True)
    true_rows = draw_true_rows(trace, TABLE, ["v100", "p100", "k80"], 0.3, 4)
    prices = SchedulerConfig(table=TABLE, prices={"v100": 2.48, "p100": 1.46, "k80": 0.45})
    texts = []
    for every in (0, 1):
        opts = SimulationOptions(
            seed=4,
            record_wall_time=False,
            progress=False,
            daemon=prices,
            trace_jobs=frozenset(j.id for j in trace),  # each job's decisions, round by round
            reload_state_every=every,
        )
        res = simulate(trace, nodes, TABLE, policy, opts, true_rows)
        texts.append(json.dumps([res.summary, res.job_trace], sort_keys=True))
    assert texts[0] == texts[1]
