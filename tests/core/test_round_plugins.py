"""The round's pipeline (core/round_stages.py, core/round_plugins.py): which plugins a
config turns on, and the smallest plugin's stage on a round's context."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS
from slurm_gavel.core.restart_aware.restart_aware_settings import RestartAwareSettings
from slurm_gavel.core.restart_costs.restart_costs_plugin import RestartCosts
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import build_problem
from slurm_gavel.core.round_plugins import pipeline_for
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.core.space_sharing.space_sharing_plugin import SpaceSharing
from slurm_gavel.core.unresponsive_nodes.unresponsive_nodes_plugin import UnresponsiveNodes
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobPlacement,
    JobState,
    Node,
    NodeSlice,
    NodeState,
    ObservedJob,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.policies import PACKING_POLICIES

TABLE = load_table()
TYPE = "ResNet-18 (batch size 64)"
OTHER = "ResNet-50 (batch size 64)"


def test_each_setting_turns_its_plugins_on_and_nothing_else():
    plain = pipeline_for(SchedulerConfig(table=TABLE))
    assert plain.names() == {
        "enrich": ["moldable_counts"],
        "pose": [],
        "keep": ["unresponsive_nodes"],
        "assign": ["mechanism"],
        "after_act": ["restart_costs"],
        "steady": [],
    }
    assert plain.allocates
    learned = pipeline_for(SchedulerConfig(table=TABLE, knowledge=Knowledge.LEARNED))
    assert learned.names()["enrich"] == ["moldable_counts", "learned_rows"]
    on = replace(DAEMON_PLUGINS, restart_aware=RestartAwareSettings(enabled=True))
    aware = SchedulerConfig(table=TABLE, plugins=on)
    names = pipeline_for(aware).names()
    # protection first, so that a run on a node that stopped answering is kept as it is
    assert names["keep"] == ["restart_aware", "unresponsive_nodes"]
    # the measured costs last: new runs are protected at the cost the round planned with
    assert names["assign"] == ["restart_aware"]
    assert names["after_act"] == ["restart_aware", "restart_costs"]
    base = pipeline_for(
        SchedulerConfig(table=TABLE, knowledge=Knowledge.LEARNED, baseline=lambda s, c: {})
    )
    assert not base.allocates
    assert base.names() == {
        "enrich": ["learned_rows"],
        "pose": [],
        "keep": ["unresponsive_nodes"],
        "assign": ["baseline"],
        "after_act": ["restart_costs"],
        "steady": [],
    }


@pytest.mark.parametrize("policy", sorted(PACKING_POLICIES))
def test_a_packing_policy_turns_space_sharing_on_with_or_without_restart_aware_rounds(policy):
    for plugins in (
        DAEMON_PLUGINS,
        replace(DAEMON_PLUGINS, restart_aware=RestartAwareSettings(True)),
    ):
        names = pipeline_for(SchedulerConfig(table=TABLE, policy=policy, plugins=plugins)).names()
        assert names["pose"] == names["steady"] == ["space_sharing"]
        # nothing else changes: the mechanism (or restart-aware rounds) places the pairs
        plain = pipeline_for(SchedulerConfig(table=TABLE, plugins=plugins)).names()
        assert {k: v for k, v in names.items() if k not in ("pose", "steady")} == {
            k: v for k, v in plain.items() if k not in ("pose", "steady")
        }
    # a baseline places the jobs itself: no problem to pose, no allocation to share
    base = pipeline_for(SchedulerConfig(table=TABLE, policy=policy, baseline=lambda s, c: {}))
    assert base.names()["pose"] == base.names()["steady"] == []


def _considered(*kinds: tuple[str, int]) -> list[tuple[ObservedJob, dict[str, float]]]:
    out = []
    for i, (job_type, sf) in enumerate(kinds):
        o = ObservedJob(job=Job(str(i), job_type, sf), state=JobState.PENDING)
        out.append((o, {"v100": 1.0, "k80": 0.5}))
    return out


def test_space_sharing_poses_the_pairs_of_the_considered_kinds_and_nothing_else():
    considered = _considered((TYPE, 1), (OTHER, 1), (OTHER, 2))
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness_packed")
    capacity = {"v100": 4, "k80": 4, "p100": 0}
    alone = build_problem(considered, SchedulerState(), config, capacity, 0.0)
    assert alone.pair_throughputs == ()  # without the plugin, the policy sees no pairs
    posed = build_problem(considered, SchedulerState(), config, capacity, 0.0, [SpaceSharing()])
    kinds = [(TYPE, 1), (OTHER, 1), (OTHER, 2)]
    assert posed.pair_throughputs == tuple(TABLE.pair_throughputs(kinds, ["v100", "k80"]))
    assert posed.pair_throughputs  # the shipped table has cells for these kinds
    assert {(p.a, p.b, p.scale_factor) for p in posed.pair_throughputs} <= {
        (TYPE, TYPE, 1), (TYPE, OTHER, 1), (OTHER, TYPE, 1), (OTHER, OTHER, 1), (OTHER, OTHER, 2)
    }  # fmt: skip
    assert replace(posed, pair_throughputs=()) == alone  # the rest as the round built it


def test_a_packed_round_runs_pairs_and_a_plain_one_never_does():
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.backends.simulated import SimulatedCluster
    from slurm_gavel.core.scheduler import placement_is_stable, run_round

    jobs = [Job(str(i), TYPE if i % 2 else OTHER, 1, total_steps=1e9) for i in range(8)]
    shared = 0
    for policy in ("max_min_fairness_packed", "max_min_fairness"):
        config = SchedulerConfig(table=TABLE, policy=policy)
        sim = SimulatedCluster(parse_cluster_spec("v100:1x2,k80:1x2", TABLE), jobs, TABLE)
        state = SchedulerState()
        for _ in range(6):
            state, report = run_round(state, sim, config)
            paired = [p for p in report.placement.jobs.values() if p.partner is not None]
            assert state.allocation is not None
            if policy == "max_min_fairness":
                assert not state.allocation.pairs and not paired
            else:
                shared += len(paired)
                # while pairs share, the simulator may not jump over rounds
                assert not paired or not placement_is_stable(state, report, pipeline_for(config))
            sim.advance(sim.clock + config.settings.round_seconds)
    assert shared > 0


def test_space_sharing_is_steady_only_with_no_pair_time_and_no_partner():
    from slurm_gavel.core.round_report import RoundReport
    from slurm_gavel.domain.cluster_model import RoundPlacement
    from slurm_gavel.domain.model import Allocation, PairShare

    def report(*placements: JobPlacement) -> RoundReport:
        placed = RoundPlacement(0, 0.0, {p.job_id: p for p in placements})
        return RoundReport(0, 0.0, False, 0.0, placed, ActResult(), len(placements))

    state = SchedulerState()
    alone = JobPlacement("a", "v100", (NodeSlice("n", 1),))
    plugin = SpaceSharing()
    assert plugin.steady(state, report(alone))  # no allocation, nothing shares
    state.allocation = Allocation(
        "max_min_fairness_packed",
        fractions={"a": {"v100": 1.0}, "b": {"v100": 0.0}},
        pairs=[PairShare(("a", "b"), {"v100": 0.0})],
    )
    assert plugin.steady(state, report(alone))  # a pair with no time cannot form
    shared = JobPlacement("a", "v100", (NodeSlice("n", 1),), "b")
    assert not plugin.steady(state, report(shared))
    state.allocation = Allocation(
        "max_min_fairness_packed",
        fractions={"a": {"v100": 1.0}},
        pairs=[PairShare(("a", "b"), {"v100": 0.25})],
    )
    assert not plugin.steady(state, report(alone))


def _running(job_id: str, *slices: NodeSlice) -> ObservedJob:
    job = Job(id=job_id, job_type=TYPE, scale_factor=sum(s.gpus for s in slices))
    return ObservedJob(job=job, state=JobState.RUNNING, gpu_type="v100", nodes=slices)


def test_unresponsive_nodes_keeps_the_runs_on_them_where_they_run():
    nodes = (
        Node("a", "v100", 4, "gpu", NodeState.NOT_RESPONDING),
        Node("b", "v100", 4),
    )
    stuck = _running("1", NodeSlice("a", 2))
    spread = _running("2", NodeSlice("a", 1), NodeSlice("b", 1))
    free = _running("3", NodeSlice("b", 2))
    waiting = ObservedJob(job=Job(id="4", job_type=TYPE, scale_factor=1), state=JobState.PENDING)
    state = SchedulerState()
    # job 2's last placement is the same place: kept as it was (it knows its layout)
    before = JobPlacement("2", "v100", spread.nodes)
    state.placement = {"2": before}
    snap = ClusterSnapshot(time=0.0, nodes=nodes, jobs=(stuck, spread, free, waiting))
    ctx = RoundContext(
        state, SchedulerConfig(table=TABLE), snap, 0.0, [stuck, spread, free, waiting], {}
    )
    kept = UnresponsiveNodes().keep(ctx)
    assert set(kept) == {"1", "2"} and kept["2"] is before
    assert kept["1"] == JobPlacement("1", "v100", stuck.nodes)
    # every node answering: nothing kept
    ctx.snap = replace(snap, nodes=(replace(nodes[0], state=NodeState.UP), nodes[1]))
    assert UnresponsiveNodes().keep(ctx) == {}


def test_restart_costs_keeps_what_the_act_reported_for_the_jobs_with_an_account():
    # the round receives the measured costs with the act's report and keeps them in
    # their own slot: the mean of the last measurement and the one before
    state = SchedulerState()
    state.jobs = {"a": JobAccount(), "b": JobAccount(), "c": JobAccount()}
    state.plugins.restart_costs.update({"a": 300.0, "gone": 50.0})
    snap = ClusterSnapshot(time=0.0, nodes=(), jobs=())
    ctx = RoundContext(state, SchedulerConfig(table=TABLE), snap, 0.0, [], {})
    ctx.result = ActResult(restart_costs=(("a", 100.0), ("b", 40.0), ("x", 9.0)))
    RestartCosts().after_act(ctx)
    # a: (300 + 100) / 2; b: its first; x has no account, "gone" lost its own
    assert state.plugins.restart_costs == {"a": 200.0, "b": 40.0}
    ctx.result = ActResult()
    del state.jobs["b"]
    RestartCosts().after_act(ctx)
    assert state.plugins.restart_costs == {"a": 200.0}


def test_a_round_keeps_the_costs_its_backend_reported_and_nothing_else_writes_them():
    # run_round hands the act's report to the after-act stage: the slot is the round's
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.backends.simulated import SimulatedCluster
    from slurm_gavel.core.scheduler import run_round

    class Measuring(SimulatedCluster):
        def act(self, placement):  # type: ignore[no-untyped-def]
            result = super().act(placement)
            return replace(result, restart_costs=tuple((j, 60.0) for j in placement.jobs))

    jobs = [Job(str(i), TYPE, 1, total_steps=1e9) for i in range(2)]
    sim = Measuring(parse_cluster_spec("v100:1x2", TABLE), jobs, TABLE)
    state, _ = run_round(SchedulerState(), sim, SchedulerConfig(table=TABLE))
    assert state.plugins.restart_costs == {"0": 60.0, "1": 60.0}
    assert state.to_json()["plugins"]["restart_costs"] == {"0": 60.0, "1": 60.0}
    plain = SimulatedCluster(parse_cluster_spec("v100:1x2", TABLE), jobs, TABLE)
    state, _ = run_round(SchedulerState(), plain, SchedulerConfig(table=TABLE))
    assert state.plugins.restart_costs == {} and "plugins" not in state.to_json()
