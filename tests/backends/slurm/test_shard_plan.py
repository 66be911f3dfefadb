"""Pairs enacted with gres/shard, planned from the captures of each release
(tests/backends/data/<release>/shards/): what Slurm reports decides who shares."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_gavel.backends.slurm.act_plan import plan_act
from slurm_gavel.backends.slurm.cli.argv import render_update
from slurm_gavel.backends.slurm.from_json import parse_jobs, parse_nodes
from slurm_gavel.backends.slurm.view import build_view
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement
from tests.backends.slurm.test_shard_pairs import CAPTURES, load, scenario

MANAGED = "gavel:type=ResNet-18"


# The view's clock after every capture was made: their waiting jobs' EligibleTime is past.
AFTER_CAPTURES = 2_000_000_000.0


def shard_view(release, managed=("a", "b", "c", "d", "e", "m"), drop=()):
    ids = scenario(release)
    _, nodes = parse_nodes(load(release, 1))
    _, jobs = parse_jobs(load(release, 0))
    jobs = [j for j in jobs if j.job_id not in {ids[k] for k in drop}]
    want = {ids[k] for k in managed}
    jobs = [replace(j, comment=MANAGED) if j.job_id in want else j for j in jobs]
    return ids, build_view(nodes, jobs, None, AFTER_CAPTURES)


def jp(job_id, gpu_type, *slices, partner=None):
    return JobPlacement(job_id, gpu_type, tuple(NodeSlice(n, g) for n, g in slices), partner)


def pair(a, b, node, gpu_type, gpus=1):
    return {
        a: jp(a, gpu_type, (node, gpus), partner=b),
        b: jp(b, gpu_type, (node, gpus), partner=a),
    }


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_two_jobs_on_one_gpus_shards_are_partners_and_the_gpu_counts_once(release):
    ids, v = shard_view(release)
    obs = {o.job.id: o for o in v.snapshot.jobs}
    a, b, c, m = (obs[ids[k]] for k in "abcm")
    assert (a.partner, b.partner) == (ids["b"], ids["a"])
    assert c.partner is None and m.partner is None  # m holds shards alone
    # m alone on half of k80-1's GPU 0 is normal (its partner ended or waits): no warning.
    assert not [w for w in v.warnings if "GPU" in w], v.warnings
    assert (a.gpu_type, a.nodes) == ("v100", (NodeSlice("v100-1", 1),))
    assert (m.gpu_type, m.nodes) == ("k80", (NodeSlice("k80-1", 1),))
    nodes = {n.name: n for n in v.snapshot.nodes}
    # v100-1: GPU 0 (a+b's shards) and GPU 1 (c), all managed: none held by others.
    assert nodes["v100-1"].gpus_held_unmanaged == 0
    assert nodes["k80-1"].gpus_held_unmanaged == 0


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_warnings_name_halves_split_over_two_gpus_and_halves_shared_with_unmanaged_jobs(release):
    ids = scenario(release)
    _, nodes = parse_nodes(load(release, 1))
    _, jobs = parse_jobs(load(release, 0))
    a, b, m = ids["a"], ids["b"], ids["m"]
    # b unmanaged: a (managed) shares v100-1's GPU 0 with a user's own shard job.
    marked = [replace(j, comment=MANAGED) if j.job_id in (a, m) else j for j in jobs]
    v = build_view(nodes, marked, None, AFTER_CAPTURES)
    (w,) = [w for w in v.warnings if "GPU" in w]
    assert w.startswith(f"job {a} shares v100-1 GPU [0] with job {b}, which is not a managed")
    # b on GPU 1 instead (c, the whole-GPU job there, gone): two lone halves of one node.
    split = []
    for j in (j for j in jobs if j.job_id != ids["c"]):
        if j.job_id == b:
            (s,) = j.gpu_slices
            j = replace(j, gpu_slices=(replace(s, indices=(1,)),))
        split.append(replace(j, comment=MANAGED) if j.job_id in (a, b) else j)
    v = build_view(nodes, split, None, AFTER_CAPTURES)
    (w,) = [w for w in v.warnings if "GPU" in w]
    assert w.startswith(f"jobs {a}, {b} each hold half of a different GPU of node v100-1")
    assert f"{a}: GPU [0], {b}: GPU [1]" in w


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_pair_that_stays_together_is_kept(release):
    ids, v = shard_view(release)
    a, b = ids["a"], ids["b"]
    plan = plan_act(RoundPlacement(0, 0, pair(a, b, "v100-1", "v100")), v, None)
    assert sorted(plan.keep) == sorted([a, b]) and not plan.moves and not plan.failed


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_job_left_alone_on_shards_is_kept_beside_its_new_partner(release):
    ids, v = shard_view(release)
    m, d = ids["m"], ids["d"]  # m alone on k80-1's shards, d waiting
    plan = plan_act(RoundPlacement(0, 0, pair(m, d, "k80-1", "k80")), v, None)
    assert plan.keep == [m] and [o.job_id for o in plan.starts] == [d]
    assert plan.starts[0].shards == 1


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_new_pair_asks_half_a_gpus_shards_each(release):
    ids, v = shard_view(release, drop=("m",))  # k80-1 has no shard in use
    d, e = ids["d"], ids["e"]  # waiting
    plan = plan_act(RoundPlacement(0, 0, pair(d, e, "k80-1", "k80")), v, None)
    assert [o.job_id for o in plan.starts] == [d, e] and not plan.failed
    for order in plan.starts:
        assert order.shards == 1  # 2 shards per GPU: one each fills GPU
        assert "NodeList=k80-1 Gres=shard:1 StartTime=now" in render_update(order)


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_moves_between_shared_and_whole_gpus(release):
    ids, v = shard_view(release)
    a, b, c = ids["a"], ids["b"], ids["c"]
    # b preempted, a placed alone where it is: a keeps its shards and runs on.
    plan = plan_act(RoundPlacement(0, 0, {a: jp(a, "v100", ("v100-1", 1))}), v, None)
    assert plan.keep == [a] and b in plan.preempt
    assert not plan.moves
    # a alone on a whole GPU elsewhere: it moves, asking all the shards of one GPU
    # (22.05 refuses a gpu request on a job that asked for shards).
    plan = plan_act(RoundPlacement(0, 0, {a: jp(a, "k80", ("k80-1", 1))}), v, None)
    assert [o.job_id for o in plan.moves] == [a] and plan.moves[0].shards == 2
    assert "NodeList=k80-1 Gres=shard:2 " in render_update(plan.moves[0])
    # ... which cannot give it two GPUs of one node: it is not moved, and says why.
    plan = plan_act(RoundPlacement(0, 0, {a: jp(a, "k80", ("k80-1", 2))}), v, None)
    ((job, why),) = plan.failed
    assert job == a and "ran on shards before" in why and not plan.moves
    # c never asked for shards: on a node with shards one GPU is still asked as that
    # GPU's shards (22.05 would refuse to pair it later otherwise) ...
    plan = plan_act(RoundPlacement(0, 0, {c: jp(c, "k80", ("k80-1", 1))}), v, None)
    assert "NodeList=k80-1 Gres=shard:2 " in render_update(plan.moves[0])
    # ... and two GPUs of one node as gpu:2.
    plan = plan_act(RoundPlacement(0, 0, {c: jp(c, "k80", ("k80-1", 2))}), v, None)
    assert "NodeList=k80-1 Gres=gpu:2 " in render_update(plan.moves[0])
    # c, on a whole GPU now, paired with a: c moves onto shards, a stays.
    placement = pair(a, c, "v100-1", "v100")
    plan = plan_act(RoundPlacement(0, 0, placement), v, None)
    assert [o.job_id for o in plan.moves] == [a, c]  # a's partner changes: b -> c
    assert all(o.shards == 1 for o in plan.moves)


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_pair_that_cannot_share_runs_apart_and_says_why(release):
    ids, v = shard_view(release)
    d, e = ids["d"], ids["e"]
    plan = plan_act(RoundPlacement(0, 0, pair(d, e, "v100-1", "v100", gpus=2)), v, None)
    assert [o.job_id for o in plan.starts] == [d] and plan.starts[0].shards == 0
    ((job, why),) = plan.failed
    assert job == e and f"not sharing with {d}" in why and "one-GPU pairs" in why


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_pair_beside_shards_that_are_leaving_starts_after_they_left(release):
    ids, v = shard_view(release)
    d, e, m = ids["d"], ids["e"], ids["m"]
    # m (on k80-1's shards) is preempted: a new pair on k80-1 started with the round's
    # other starts would land beside it; it starts after the act's wait for exits.
    plan = plan_act(RoundPlacement(0, 0, pair(d, e, "k80-1", "k80")), v, None)
    assert m in plan.preempt and not plan.starts and not plan.failed
    assert [(a.order.job_id, a.holder, a.partner) for a in plan.after_exit] == [
        (d, m, e),
        (e, m, d),
    ]
    assert all(
        a.order.shards == 1 and f"job {m} stops this round" in a.why for a in plan.after_exit
    )
    # m kept, alone on half of GPU 0: the pair would split the same way; it waits too.
    placement = {**pair(d, e, "k80-1", "k80"), m: jp(m, "k80", ("k80-1", 1))}
    plan = plan_act(RoundPlacement(0, 0, placement), v, None)
    assert plan.keep == [m] and not plan.starts
    assert all(f"job {m} runs alone on half a GPU" in why for _, why in plan.failed)
    # A whole-GPU job is not held back (Slurm gives it a GPU with no shard in use).
    plan = plan_act(RoundPlacement(0, 0, {d: jp(d, "k80", ("k80-1", 1))}), v, None)
    assert [o.job_id for o in plan.starts] == [d]


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_pair_member_moved_beside_a_lone_shard_job_is_stopped_and_waits(release):
    ids, v = shard_view(release)
    c, d, m = ids["c"], ids["d"], ids["m"]
    # c (whole GPU on v100-1) paired with d on k80-1, where m runs alone on half a GPU.
    placement = {**pair(c, d, "k80-1", "k80"), m: jp(m, "k80", ("k80-1", 1))}
    plan = plan_act(RoundPlacement(0, 0, placement), v, None)
    assert plan.keep == [m] and not plan.moves and not plan.starts
    assert c in plan.preempt
    reasons = dict(plan.failed)
    assert f"job {m} runs alone on half a GPU" in reasons[c]
    assert f"job {m} runs alone on half a GPU" in reasons[d]


@pytest.mark.parametrize("release", sorted(CAPTURES))
def test_a_job_the_last_act_released_and_slurm_has_not_started_is_not_updated_again(release):
    from slurm_gavel.backends.slurm.cli.transport import cli_backend

    ids, v = shard_view(release, drop=("m",))
    d, e = ids["d"], ids["e"]  # pending, not held (waiting for resources)
    placement = RoundPlacement(1, 0, pair(d, e, "k80-1", "k80"))
    plan = plan_act(placement, v, None)
    cluster = cli_backend()  # no command runs here
    cluster._released = {d: plan.starts[0]}
    assert [o.job_id for o in cluster._not_released_already(plan, v)[0]] == [e]
    assert d in plan.keep  # released, same order: keeps its lease
    # Released elsewhere last time, or held since: the order is issued again.
    plan = plan_act(placement, v, None)
    cluster._released = {d: replace(plan.starts[0], nodes=("v100-1",))}
    assert [o.job_id for o in cluster._not_released_already(plan, v)[0]] == [d, e]
    plan = plan_act(placement, v, None)
    cluster._released = {d: plan.starts[0]}
    v.managed[d] = replace(v.managed[d], priority=0)  # held
    assert [o.job_id for o in cluster._not_released_already(plan, v)[0]] == [d, e]
