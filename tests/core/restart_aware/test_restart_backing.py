"""When a protected run whose type the allocation no longer backs is let go
(core/restart_aware/restart_backing.py): within its first c / b only for a job that holds no GPU and
lacks one of the type, or for a running job whose move there pays for both; past it,
or for a job that declares no total steps, at once; hostile figures count as unknown."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from plugin_configs import overhead, restart_aware

from slurm_gavel.core.restart_aware.restart_aware import protect_new_runs, protected_runs
from slurm_gavel.core.restart_aware.restart_backing import short_types, swap_pays, time_left
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState, copy_state
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, Node, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Allocation, Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
TYPES = ("v100", "p100", "k80")
ROW = {t: TABLE.throughput(RESNET, 1, t) for t in TYPES}
# 300 s restarts, budget 0.1: a run's paid-for part (c / b) is 3,000 s
CONFIG = SchedulerConfig(table=TABLE, settings=overhead(300.0), plugins=restart_aware(budget=0.1))
NOW = 10_000.0
NODES = [Node("v100-000", "v100", 1), Node("p100-000", "p100", 1), Node("k80-000", "k80", 1)]


def _on(job_id, gpu_type):
    return JobPlacement(job_id, gpu_type, (NodeSlice(f"{gpu_type}-000", 1),), None, True)


def _job(job_id, hours_on_v100=10.0):
    return Job(job_id, RESNET, 1, total_steps=ROW["v100"] * hours_on_v100 * 3600.0)


def _swap_state(started, a=None, b=None):
    """a runs on the p100, b on the v100, both protected until NOW + 5,000 s, their
    runs started at ``started``; the new allocation swaps them (a: v100, b: p100)."""
    a = a or _job("a")
    b = b or _job("b")
    state = SchedulerState()
    state.jobs = {"a": JobAccount(), "b": JobAccount()}
    state.plugins.restart_aware = {
        j: RunProtection(run_started=started, protected_until=NOW + 5000.0) for j in ("a", "b")
    }
    state.placement = {"a": _on("a", "p100"), "b": _on("b", "v100")}
    state.allocation = Allocation("m", {"a": {"v100": 1.0}, "b": {"p100": 1.0}})
    considered = [
        (ObservedJob(j, JobState.RUNNING, state.placement[j.id].gpu_type,
                     state.placement[j.id].nodes), ROW)
        for j in (a, b)
    ]  # fmt: skip
    return state, considered


def test_two_alike_runs_the_allocation_swaps_are_kept_within_their_paid_for_part():
    # Each would lose its restart plus the slowdown of the other's type and gain
    # nothing the other does not lose: the swap does not pay, both stay (before this
    # rule both lost their protection and swapped, two restarts).
    state, considered = _swap_state(started=NOW - 1000.0)
    assert set(protected_runs(state, considered, NODES, NOW, CONFIG)) == {"a", "b"}


def test_past_its_paid_for_part_a_run_the_allocation_moved_away_is_let_go():
    state, considered = _swap_state(started=NOW - 3000.0)
    assert protected_runs(state, considered, NODES, NOW, CONFIG) == {}
    # a run whose start is unknown (a state written before the start was recorded)
    state, considered = _swap_state(started=None)
    assert protected_runs(state, considered, NODES, NOW, CONFIG) == {}


def test_a_job_that_declares_no_total_is_let_go_at_once():
    # The allocation takes b off the v100 (both now on the p100) and nobody wants the
    # v100: b's run is kept for its paid-for part when its remaining work is known,
    # let go at once when its job declares no total (its loss is unknown).
    for b, kept in ((_job("b"), {"a", "b"}), (Job("b", RESNET, 1), {"a"})):
        state, considered = _swap_state(NOW - 1000.0, b=b)
        state.allocation = Allocation("m", {"a": {"p100": 1.0}, "b": {"p100": 1.0}})
        assert set(protected_runs(state, considered, NODES, NOW, CONFIG)) == kept
    # and a running job with no total that the allocation wants on b's type frees it
    state, considered = _swap_state(NOW - 1000.0, a=Job("a", RESNET, 1))
    assert protected_runs(state, considered, NODES, NOW, CONFIG) == {}


def test_a_swap_that_pays_for_both_is_made():
    # b is nearly done (0.01 h on a v100 left): moving it to the p100 loses its 300 s
    # restart plus a few seconds, while a (10 h of work) saves hours on the v100; so
    # both runs are let go (with 10 h each, the test above, neither is).
    state, considered = _swap_state(NOW - 1000.0, b=_job("b", hours_on_v100=0.01))
    assert protected_runs(state, considered, NODES, NOW, CONFIG) == {}


def test_a_job_with_no_gpu_that_lacks_one_of_the_type_gets_the_run_let_go():
    state, considered = _swap_state(NOW - 1000.0)
    c = _job("c")
    state.jobs["c"] = JobAccount()
    state.allocation = Allocation("m", {"a": {"v100": 1.0}, "b": {"p100": 1.0}, "c": {"v100": 1.0}})
    considered.append((ObservedJob(c, JobState.PENDING), ROW))
    assert set(protected_runs(state, considered, NODES, NOW, CONFIG)) == {"a"}
    # with an idle v100 c needs nobody's: b stays
    more = [*NODES, Node("v100-001", "v100", 1)]
    assert set(protected_runs(state, considered, more, NOW, CONFIG)) == {"a", "b"}


def test_short_types_count_idle_gpus_and_every_type_a_waiting_job_may_use():
    state = SchedulerState()
    state.placement = {"r": _on("r", "v100")}
    state.allocation = Allocation(
        "m", {"r": {"v100": 1.0}, "w": {"v100": 0.5, "p100": 0.5}, "z": {"k80": 0.0}}
    )
    considered = [
        (ObservedJob(_job("r"), JobState.RUNNING, "v100", state.placement["r"].nodes), ROW),
        (ObservedJob(Job("w", RESNET, 2, total_steps=1.0), JobState.PENDING), ROW),
        (ObservedJob(_job("z"), JobState.PENDING), ROW),  # no time anywhere: wants nothing
    ]
    nodes = [Node("v100-000", "v100", 2), Node("p100-000", "p100", 1)]
    # v100: 1 idle of 2, w needs 2 -> short; p100: 1 idle, w needs 2 -> short
    assert short_types(state, considered, nodes) == {"v100", "p100"}
    nodes = [Node("v100-000", "v100", 3), Node("p100-000", "p100", 2)]
    assert short_types(state, considered, nodes) == set()
    state.allocation = None
    assert short_types(state, considered, nodes) == set()


@pytest.mark.parametrize(
    ("total", "done"),
    [(math.nan, 0.0), (math.inf, 0.0), (1e9, math.nan), (1e9, -math.inf)],
)
def test_hostile_step_figures_count_as_unknown_and_let_the_run_go(total, done):
    # total_steps and steps_done are the job's word in the daemon: figures that are not
    # finite numbers must not keep a run (nor raise); they let it go, as before the rule
    b = replace(_job("b"), total_steps=total)
    state, considered = _swap_state(NOW - 1000.0, b=b)
    state.jobs["b"].steps_done = done
    assert math.isnan(time_left(b, state.jobs["b"], ROW["v100"]))

    def cost(j):
        return 300.0

    assert swap_pays(state, considered, b, ROW, "v100", cost)
    assert "b" not in protected_runs(state, considered, NODES, NOW, CONFIG)


def test_a_new_run_records_its_start_and_the_state_file_keeps_it():
    state = SchedulerState()
    state.allocation = Allocation("m", {"a": {"v100": 1.0}, "b": {"p100": 1.0}})
    state.jobs = {"a": JobAccount(), "b": JobAccount()}
    state.plugins.restart_aware = {"b": RunProtection(run_started=5.0)}
    state.placement = {"a": _on("a", "v100")}
    protect_new_runs(state, CONFIG, {}, {"a": _job("a"), "b": _job("b")}, set(), 700.0)
    slot = state.plugins.restart_aware
    assert slot["a"].run_started == 700.0
    assert "b" not in slot  # not placed: no current run
    again = copy_state(state).plugins.restart_aware  # through the JSON the daemon persists
    assert again["a"].run_started == 700.0 and "b" not in again
    # a kept run keeps its start
    protect_new_runs(state, CONFIG, dict(state.placement), {"a": _job("a")}, set(), 1060.0)
    assert state.plugins.restart_aware["a"].run_started == 700.0
