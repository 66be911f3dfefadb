"""Round mechanism properties: convergence to the allocation, lease extension,
consolidation, pairs, and Gavel's handling of zero / unreceived priorities."""

from __future__ import annotations

import itertools
import math

import pytest

from slurm_gavel.core.mechanism import (
    MechanismJob,
    assign,
    deficit,
    entries,
    pair_key,
    priority,
)
from slurm_gavel.domain.cluster_model import JobPlacement, Node
from slurm_gavel.domain.model import Allocation, PairShare

TPUT = {"v100": 3.0, "k80": 1.0}


def _jobs(sizes: dict[str, int], current: dict[str, JobPlacement] | None = None):
    current = current or {}
    return {j: MechanismJob(j, sf, TPUT, current.get(j)) for j, sf in sizes.items()}


def _run_rounds(alloc, sizes, nodes, rounds, stay_credit_seconds=None):
    """Drive the mechanism like the scheduler does: credit each round's placement."""
    received: dict[str, dict[str, float]] = {}
    elapsed = 0.0
    current: dict[str, JobPlacement] = {}
    history = []
    for _ in range(rounds):
        if stay_credit_seconds is None:
            placed = assign(alloc, _jobs(sizes, current), nodes, received, elapsed)
        else:
            placed = assign(
                alloc,
                _jobs(sizes, current),
                nodes,
                received,
                elapsed,
                stay_credit_seconds=stay_credit_seconds,
            )
        history.append(placed)
        seen = set()
        for j, p in placed.items():
            key = j if p.partner is None else pair_key(j, p.partner)
            if key in seen:
                continue
            seen.add(key)
            row = received.setdefault(key, {})
            row[p.gpu_type] = row.get(p.gpu_type, 0.0) + 1.0
        elapsed += 1.0
        current = placed
    return history, received, elapsed


# Five one-GPU jobs on 2 v100 + 2 k80, some split over both types.
TWO_TYPES = [Node("v0", "v100", 2), Node("k0", "k80", 2)]
FIVE_JOBS = {
    "a": {"v100": 0.8},
    "b": {"v100": 0.6, "k80": 0.4},
    "c": {"v100": 0.6, "k80": 0.2},
    "d": {"k80": 0.7},
    "e": {"k80": 0.7},
}


def test_realised_time_shares_converge_to_the_allocation():
    nodes, fractions = TWO_TYPES, FIVE_JOBS
    alloc = Allocation("test", fractions)
    _, received, elapsed = _run_rounds(alloc, dict.fromkeys(fractions, 1), nodes, 400)
    for job, row in fractions.items():
        for t, x in row.items():
            got = received.get(job, {}).get(t, 0.0) / elapsed
            assert got == pytest.approx(x, abs=0.02), (job, t, got, x)


def test_lease_extension_keeps_jobs_on_the_same_nodes_when_the_allocation_is_stable():
    nodes = [Node("v0", "v100", 4), Node("v1", "v100", 4)]
    alloc = Allocation("test", {"a": {"v100": 1.0}, "b": {"v100": 1.0}, "c": {"v100": 1.0}})
    history, _, _ = _run_rounds(alloc, {"a": 2, "b": 4, "c": 1}, nodes, 30)
    first = history[0]
    assert set(first) == {"a", "b", "c"}
    for placed in history[1:]:
        for j, p in placed.items():
            assert p.same_place(first[j]), (j, p, first[j])


def test_a_multi_gpu_job_goes_on_one_node_when_one_has_room():
    nodes = [Node("v0", "v100", 4), Node("v1", "v100", 4)]
    alloc = Allocation("test", {"big": {"v100": 1.0}, "s1": {"v100": 1.0}, "s2": {"v100": 1.0}})
    placed = assign(alloc, _jobs({"big": 4, "s1": 1, "s2": 1}), nodes, {}, 0.0)
    assert len(placed["big"].nodes) == 1 and placed["big"].nodes[0].gpus == 4
    assert placed["big"].consolidated
    # the two small jobs share the other node instead of fragmenting both
    assert {placed["s1"].nodes[0].node, placed["s2"].nodes[0].node} == {
        "v0",
        "v1",
    } - {placed["big"].nodes[0].node}


def test_a_spread_job_is_marked_unconsolidated():
    nodes = [Node("v0", "v100", 4), Node("v1", "v100", 4)]
    # two running 1-GPU jobs, one on each node, keep their place (lease extension);
    # the 4-GPU job then has to spread.
    cur = {
        "s1": JobPlacement("s1", "v100", (_slice("v0", 1),)),
        "s2": JobPlacement("s2", "v100", (_slice("v1", 1),)),
    }
    alloc = Allocation("test", {"big": {"v100": 1.0}, "s1": {"v100": 1.0}, "s2": {"v100": 1.0}})
    placed = assign(alloc, _jobs({"big": 4, "s1": 1, "s2": 1}, cur), nodes, {}, 0.0)
    assert placed["s1"].same_place(cur["s1"]) and placed["s2"].same_place(cur["s2"])
    assert sum(s.gpus for s in placed["big"].nodes) == 4
    assert len(placed["big"].nodes) == 2
    assert not placed["big"].consolidated


def _slice(node: str, gpus: int):
    from slurm_gavel.domain.cluster_model import NodeSlice

    return NodeSlice(node, gpus)


def test_pairs_are_placed_together_on_the_same_gpus():
    nodes = [Node("v0", "v100", 1)]
    alloc = Allocation("test", {"a": {}, "b": {}}, [PairShare(("a", "b"), {"v100": 1.0})])
    placed = assign(alloc, _jobs({"a": 1, "b": 1}), nodes, {}, 0.0)
    assert set(placed) == {"a", "b"}
    assert placed["a"].nodes == placed["b"].nodes
    assert placed["a"].partner == "b" and placed["b"].partner == "a"


def test_priorities_follow_gavel_for_unreceived_and_zero_allocations():
    jobs = _jobs({"new": 1, "old": 1, "none": 1})
    alloc = Allocation("test", {"new": {"v100": 0.5}, "old": {"v100": 0.5}, "none": {}})
    received = {"old": {"v100": 10.0}}
    ranked = entries(alloc, jobs, received, 20.0, ["v100", "k80"])
    prio = {(e.key, e.gpu_type): e.priority for e in ranked}
    assert math.isinf(prio[("new", "v100")])  # allocated, never ran there: first
    assert prio[("old", "v100")] == pytest.approx(0.5 / (10.0 / 20.0))
    assert prio[("none", "v100")] == 0.0  # no allocation: only a filler
    assert ranked[0].key == "new"


def test_zero_priority_jobs_fill_idle_gpus_but_never_a_type_they_cannot_use():
    nodes = [Node("v0", "v100", 2), Node("k0", "k80", 1)]
    jobs = {
        "a": MechanismJob("a", 1, {"v100": 2.0, "k80": 0.0}),
        "b": MechanismJob("b", 1, {"v100": 2.0, "k80": 0.0}),
        "c": MechanismJob("c", 1, {"v100": 2.0, "k80": 0.0}),
    }
    alloc = Allocation("test", {"a": {"v100": 1.0}, "b": {"v100": 1.0}, "c": {}})
    placed = assign(alloc, jobs, nodes, {}, 0.0)
    assert set(placed) == {"a", "b"}  # c cannot use the idle K80 and V100s are full
    placed = assign(alloc, jobs, [Node("v0", "v100", 3)], {}, 0.0)
    assert set(placed) == {"a", "b", "c"}  # a free V100: the unallocated job fills it


def test_capacity_is_never_exceeded():
    nodes = [Node("v0", "v100", 4), Node("v1", "v100", 4), Node("k0", "k80", 4)]
    sizes = {f"j{i}": sf for i, sf in enumerate([1, 2, 4, 8, 1, 1, 2, 4, 1])}
    alloc = Allocation("test", {j: {"v100": 0.5, "k80": 0.5} for j in sizes})
    history, _, _ = _run_rounds(alloc, sizes, nodes, 20)
    for placed in history:
        used: dict[str, int] = {}
        for p in placed.values():
            for s in p.nodes:
                used[s.node] = used.get(s.node, 0) + s.gpus
        assert all(used.get(n.name, 0) <= n.gpus for n in nodes)
        for j, p in placed.items():
            assert p.gpus == sizes[j]
            assert {n.gpu_type for n in nodes if n.name in {s.node for s in p.nodes}} == {
                p.gpu_type
            }


def _switches(alloc, sizes, nodes, rounds, stay_credit_seconds):
    history, received, elapsed = _run_rounds(alloc, sizes, nodes, rounds, stay_credit_seconds)
    n = 0
    for prev, cur in itertools.pairwise(history):
        n += sum(1 for j, p in cur.items() if j in prev and prev[j].gpu_type != p.gpu_type)
    return n, history, received, elapsed


def test_stay_credit_turns_per_round_type_switches_into_longer_stints():
    # underloaded: one job, one GPU of each type, allocation 0.5 / 0.5
    nodes = [Node("v0", "v100", 1), Node("k0", "k80", 1)]
    alloc = Allocation("test", {"a": {"v100": 0.5, "k80": 0.5}})
    gavel, history, _, _ = _switches(alloc, {"a": 1}, nodes, 40, 0.0)
    assert gavel >= 15  # Gavel switches type (restarts) every other round or more
    assert all("a" in placed for placed in history)
    credited, history, received, elapsed = _switches(alloc, {"a": 1}, nodes, 40, 5.0)
    assert credited <= gavel // 3
    assert all("a" in placed for placed in history)  # it always runs
    for t in ("v100", "k80"):  # and still gets about its allocation
        assert received["a"][t] / elapsed == pytest.approx(0.5, abs=0.15)


def test_stay_credit_zero_is_gavel_exactly():
    nodes, fractions = TWO_TYPES, FIVE_JOBS
    alloc = Allocation("test", fractions)
    sizes = dict.fromkeys(fractions, 1)
    assert _run_rounds(alloc, sizes, nodes, 50) == _run_rounds(alloc, sizes, nodes, 50, 0.0)


@pytest.mark.parametrize("x", [0.0, 0.25, 1.0, 3.0, -1.0])
@pytest.mark.parametrize("got", [0.0, 1e-300, 5.0, 59.9, 600.0])
@pytest.mark.parametrize("elapsed", [0.0, 1.0, 60.0, 1e6])
def test_priority_and_deficit_are_what_entries_ranks_by(x, got, elapsed):
    """priority() and deficit(), which `status` and `explain` compute a job's figures
    with, equal what entries() gives a job and a pair (the same formula written inline
    in the ranking loop)."""
    alloc = Allocation(policy="p", fractions={"a": {"v100": x}, "b": {}, "c": {}},
                       pairs=[PairShare(("b", "c"), {"v100": abs(x) or 0.5})])  # fmt: skip
    jobs = _jobs({"a": 1, "b": 1, "c": 1})
    received = {"a": {"v100": got}, pair_key("b", "c"): {"v100": got}}
    got_entries = {e.key: e for e in entries(alloc, jobs, received, elapsed, ["v100"])}
    e = got_entries["a"]
    assert (e.priority, e.deficit) == (priority(x, got, elapsed), deficit(x, got, elapsed))
    p = got_entries[pair_key("b", "c")]
    xp = abs(x) or 0.5
    assert (p.priority, p.deficit) == (priority(xp, got, elapsed), deficit(xp, got, elapsed))
