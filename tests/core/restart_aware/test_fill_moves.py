"""Fills that move only when the move pays its restart (core/restart_aware/fill_moves.py): a running
fill on a K80 with a spare P100 stays where the P100's rate gain does not pay the
restart over the expected stay, and moves where it does; Gavel's order is unchanged
with free restarts; hostile rates, costs and step counts (a job's learned row comes
from its own progress reports) never make a fill move where Gavel would not, and never
keep it against an entry that outranks it."""

from __future__ import annotations

import math

import pytest
from plugin_configs import overhead, restart_aware

from slurm_gavel.core.mechanism import MechanismJob
from slurm_gavel.core.restart_aware.fill_moves import (
    expected_stay,
    fills_stay,
    move_pays,
    select_staying,
)
from slurm_gavel.core.restart_aware.restart_aware import assign_around
from slurm_gavel.core.restart_aware.run_protection import RunProtection
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_jobs import Considered
from slurm_gavel.core.scheduler_state import JobAccount, SchedulerState
from slurm_gavel.domain.cluster_model import JobPlacement, JobState, Node, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Allocation, Job
from slurm_gavel.domain.throughputs import load_table

TABLE = load_table()
RESNET = "ResNet-50 (batch size 64)"
HOSTILE = [math.nan, math.inf, -math.inf, 1e308, -1.0, 0.0]


def test_a_move_pays_when_the_new_rate_over_the_stay_less_the_restart_beats_staying():
    # 300 s restart over a 3,000 s stay: the new type must be more than 3000/2700 as fast
    assert move_pays(1.0, 1.2, 300.0, 3000.0)
    assert not move_pays(1.0, 1.1, 300.0, 3000.0)
    assert not move_pays(1.0, 3000.0 / 2700.0, 300.0, 3000.0)  # break-even is no gain
    assert not move_pays(2.0, 1.0, 300.0, 3000.0)  # a slower type never pays
    assert not move_pays(1.0, 100.0, 300.0, 300.0)  # a stay no longer than the restart
    assert move_pays(2.0, 1.0, 0.0, 3000.0)  # a free restart: Gavel's move, whatever
    # no fill moves A -> B -> A while its rates stand, whatever the stay
    for stay in (400.0, 3000.0, 1e9):
        for a, b in ((1.0, 1.5), (1.5, 1.0), (1.0, 1.0)):
            assert not (move_pays(a, b, 300.0, stay) and move_pays(b, a, 300.0, stay))


@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_figures_never_make_a_move_pay_except_a_faster_finite_rate(bad):
    # rates come from the job's own progress reports, the restart cost from its first
    # report after a restart, the stay from its declared total steps
    finite = math.isfinite(bad)
    assert move_pays(1.0, bad, 300.0, 3000.0) is (finite and bad * 2700.0 > 3000.0)
    assert move_pays(bad, 2.0, 300.0, 3000.0) is (finite and bad * 3000.0 < 2.0 * 2700.0)
    assert move_pays(1.0, 2.0, 300.0, bad) is (finite and 2.0 * (bad - 300.0) > bad > 300.0)
    assert move_pays(1.0, 2.0, bad, 3000.0) is (finite and (bad <= 0.0 or bad < 1500.0))


def test_the_stay_is_c_over_b_or_the_time_left_if_shorter_and_known():
    assert expected_stay(3000.0, 1e12) == 3000.0
    assert expected_stay(3000.0, 600.0) == 600.0
    assert expected_stay(3000.0, math.inf) == 3000.0  # no rate there: no shorter
    assert expected_stay(3000.0, math.nan) == 3000.0  # unknown remaining work


# sort keys as mechanism._ranked makes them: (-priority, -deficit, -fraction,
# -runs_here, key, type, members); a fill has fraction 0 and its deficit is the
# time it received on the type.
def _fill(job, gpu_type, received, here=False):
    return (-0.0, received, -0.0, -1 if here else 0, job, gpu_type, (job,))


def test_fills_stay_ranks_a_move_that_does_not_pay_right_after_the_fill_s_own_entry():
    backed = (-2.0, -10.0, -0.5, 0, "v", "v100", ("v",))
    f_p100 = _fill("f", "p100", 0.0)  # f runs on k80: least received on p100, first
    g_k80 = _fill("g", "k80", 100.0)  # another job, not running
    f_k80 = _fill("f", "k80", 720.0, here=True)
    f_v100 = _fill("f", "v100", 900.0)
    gavel = sorted([backed, f_p100, g_k80, f_k80, f_v100])
    assert gavel == [backed, f_p100, g_k80, f_k80, f_v100]
    stays, staying = fills_stay(gavel, lambda j, here, there: False)
    assert stays == [backed, g_k80, f_k80, f_p100, f_v100] and staying == {"f": "k80"}
    assert fills_stay(gavel, lambda j, here, there: True) == (gavel, {})
    assert fills_stay(gavel, lambda j, here, there: False, exempt={"f"}) == (gavel, {})
    asked = []

    def ask(j: str, here: str, there: str) -> bool:
        asked.append((j, here, there))
        return False

    fills_stay(gavel, ask)
    assert asked == [("f", "k80", "p100")]  # only entries ahead of its own are priced
    # a job running on a type the allocation backs is no fill: Gavel's order
    f_backed = (-1.0, -5.0, -0.3, -1, "f", "k80", ("f",))
    mixed = sorted([backed, f_p100, g_k80, f_backed])
    assert fills_stay(mixed, lambda j, here, there: False) == (mixed, {})


def test_a_fill_that_loses_its_own_gpu_still_moves_in_gavel_s_order():
    # One K80, one P100. f fills the K80 and its P100 move does not pay, but v, which
    # the allocation wants on the K80, outranks it there: f cannot stay, so its P100
    # entry keeps Gavel's rank, ahead of g's, instead of coming after g took the P100.
    v_k80 = (-2.0, -10.0, -0.5, 0, "v", "k80", ("v",))
    f_p100 = _fill("f", "p100", 0.0)
    g_p100 = _fill("g", "p100", 100.0)
    f_k80 = _fill("f", "k80", 720.0, here=True)
    ranked = [v_k80, f_p100, g_p100, f_k80]
    jobs = {j: MechanismJob(j, 1, {"k80": 1.0, "p100": 1.0}) for j in "vfg"}
    order, chosen = select_staying(ranked, jobs, {"k80": 1, "p100": 1}, lambda j, a, b: False)
    assert order == ranked and [order[i][4:6] for i in chosen] == [("v", "k80"), ("f", "p100")]
    # with the K80 free for it, f stays and g takes the P100
    order, chosen = select_staying(ranked[1:], jobs, {"k80": 1, "p100": 1}, lambda j, a, b: False)
    assert [order[i][4:6] for i in chosen] == [("g", "p100"), ("f", "k80")]


def _round(rate_k80, rate_p100, cost=300.0, steps_left=1e9):
    """A round with one V100 kept for another job's protected run, a spare P100 and
    the K80 that f, allocated only V100 time, fills: f has received 720 s on the K80
    this epoch and nothing on the P100, so Gavel's order moves it there."""
    config = SchedulerConfig(table=TABLE, settings=overhead(cost), plugins=restart_aware())
    f = Job("f", RESNET, 1, total_steps=1000.0 + steps_left)
    v = Job("v", RESNET, 1, total_steps=1e9)
    on_k80 = JobPlacement("f", "k80", (NodeSlice("k80-0", 1),))
    on_v100 = JobPlacement("v", "v100", (NodeSlice("v100-0", 1),))
    state = SchedulerState()
    state.allocation = Allocation("max_min_fairness", {"f": {"v100": 0.5}, "v": {"v100": 0.5}})
    state.jobs = {
        "f": JobAccount(first_start=0.0, steps_done=1000.0, received_s={"k80": 720.0}),
        "v": JobAccount(first_start=0.0),
    }
    state.plugins.restart_aware = {"v": RunProtection(protected_until=1e9)}
    state.placement = {"f": on_k80, "v": on_v100}
    state.epoch_received = {"f": {"k80": 720.0}, "v": {"v100": 720.0}}
    state.epoch_elapsed = 720.0
    row = {"v100": 10.0, "p100": rate_p100, "k80": rate_k80}
    considered: list[Considered] = [
        (ObservedJob(f, JobState.RUNNING, "k80", on_k80.nodes), row),
        (ObservedJob(v, JobState.RUNNING, "v100", on_v100.nodes), {"v100": 10.0}),
    ]
    free = [Node("p100-0", "p100", 1), Node("k80-0", "k80", 1)]
    capacity = {"v100": 1, "p100": 1, "k80": 1}
    placed, _ = assign_around(state, config, considered, free, {"v": on_v100}, capacity, 720.0)
    return placed["f"].gpu_type


def test_a_fill_on_a_k80_stays_when_the_p100_s_gain_does_not_pay_its_restart():
    # 300 s restart, budget 0.1: over c / b = 3,000 s a move must gain > 11 %
    assert _round(1.0, 1.05) == "k80"  # Gavel: p100 (least received there)
    assert _round(1.0, 1.05, cost=0.0) == "p100"  # free restarts: Gavel's move


def test_a_fill_on_a_k80_moves_when_the_p100_s_gain_pays_its_restart():
    assert _round(1.0, 2.0) == "p100"
    # ... unless the job is nearly done: 600 steps left at 2/s is a 300 s stay
    assert _round(1.0, 2.0, steps_left=600.0) == "k80"


# a learned rate on the type it runs on (K80) / on the spare P100 -> where f runs.
# inf: the move does not pay (Gavel: P100 both times); absurdly large on the K80: no
# move pays from there; absurdly large on the P100: its remaining steps would take
# no time there, so the move does not pay either; NaN, 0 or below: no entry on that
# type at all (the mechanism's "cannot run there"), so a K80 figure makes it no fill
# there and Gavel's order places it on the P100
@pytest.mark.parametrize(
    ("bad", "on_k80", "on_p100"),
    [
        (math.nan, "p100", "k80"),
        (math.inf, "k80", "k80"),
        (1e308, "k80", "k80"),
        (0.0, "p100", "k80"),
        (-1.0, "p100", "k80"),
        (-math.inf, "p100", "k80"),
    ],
)
def test_a_hostile_learned_rate_moves_a_fill_no_more_than_gavel(bad, on_k80, on_p100):
    assert _round(bad, 2.0) == on_k80
    assert _round(1.0, bad) == on_p100
