"""The round's pipeline (core/round_stages.py, core/round_plugins.py): which plugins a
config turns on, and the smallest plugin's stage on a round's context."""

from __future__ import annotations

from dataclasses import replace

from slurm_gavel.core.job_rows import Knowledge
from slurm_gavel.core.plugin_settings import DAEMON_PLUGINS, RestartAwareSettings
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_plugins import UnresponsiveNodes, pipeline_for
from slurm_gavel.core.round_stages import RoundContext
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import (
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

TABLE = load_table()
TYPE = "ResNet-18 (batch size 64)"


def test_each_setting_turns_its_plugins_on_and_nothing_else():
    plain = pipeline_for(SchedulerConfig(table=TABLE))
    assert plain.names() == {
        "enrich": ["moldable_counts"],
        "keep": ["unresponsive_nodes"],
        "assign": ["mechanism"],
        "after_act": [],
    }
    assert plain.allocates
    learned = pipeline_for(SchedulerConfig(table=TABLE, knowledge=Knowledge.LEARNED))
    assert learned.names()["enrich"] == ["moldable_counts", "learned_rows"]
    on = replace(DAEMON_PLUGINS, restart_aware=RestartAwareSettings(enabled=True))
    aware = SchedulerConfig(table=TABLE, plugins=on)
    names = pipeline_for(aware).names()
    # protection first, so that a run on a node that stopped answering is kept as it is
    assert names["keep"] == ["restart_aware", "unresponsive_nodes"]
    assert names["assign"] == ["restart_aware"] and names["after_act"] == ["restart_aware"]
    base = pipeline_for(
        SchedulerConfig(table=TABLE, knowledge=Knowledge.LEARNED, baseline=lambda s, c: {})
    )
    assert not base.allocates
    assert base.names() == {
        "enrich": ["learned_rows"],
        "keep": ["unresponsive_nodes"],
        "assign": ["baseline"],
        "after_act": [],
    }


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
