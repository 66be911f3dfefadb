"""A job whose request fixes its node count (Job.node_count: sbatch -N 2, or its tasks
over --ntasks-per-node) is placed on exactly that many nodes with its GPUs even over
them, or waits: never packed onto fewer nodes (22.05 then calls it never runnable,
26.05 runs it with fewer ranks), never spread over more."""

from __future__ import annotations

from slurm_gavel.core.mechanism import MechanismJob, assign
from slurm_gavel.core.node_placement import place_chosen
from slurm_gavel.domain.cluster_model import JobPlacement, Node, NodeSlice
from slurm_gavel.domain.model import Allocation

ROW = {"v100": 2.0, "p100": 1.0}


def laid(p: JobPlacement) -> list[tuple[str, int]]:
    return sorted((s.node, s.gpus) for s in p.nodes)


def nodes(*free: int, gpu_type: str = "v100", size: int = 4) -> list[Node]:
    return [
        Node(f"{gpu_type}-{i + 1}", gpu_type, size, gpus_held_unmanaged=size - f)
        for i, f in enumerate(free)
    ]


def test_one_rank_per_node_is_not_packed_onto_one_node():
    """The usual DDP layout: 2 nodes, 1 GPU each, although one node has room for both."""
    jobs = {"a": MechanismJob("a", 2, ROW, node_count=2)}
    placed = assign(Allocation("t", {"a": {"v100": 1.0}}), jobs, nodes(4, 4), {}, 0.0)
    assert laid(placed["a"]) == [("v100-1", 1), ("v100-2", 1)]
    assert placed["a"].consolidated  # as consolidated as its request allows
    # without a layout the same job goes on one node (best fit), as before
    free = {"a": MechanismJob("a", 2, ROW)}
    placed = assign(Allocation("t", {"a": {"v100": 1.0}}), free, nodes(4, 4), {}, 0.0)
    assert placed["a"].nodes == (NodeSlice("v100-1", 2),)


def test_gpus_per_node_are_the_scale_over_the_node_count_best_fit_each():
    jobs = {"a": MechanismJob("a", 4, ROW, node_count=2)}
    # v100-2 has 2 free (the best fit for 2), v100-1 and v100-3 have 4
    placed = place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 2, 4))
    assert laid(placed["a"]) == [("v100-1", 2), ("v100-2", 2)]


def test_a_job_whose_layout_does_not_fit_waits_this_round():
    """Enough GPUs of the type in all (select() counts those), but only one node has
    room for its per-node share: it waits, nothing is placed in its stead on fewer nodes."""
    jobs = {"a": MechanismJob("a", 4, ROW, node_count=2)}
    assert place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 1, 1)) == {}
    # one node asked for (-N 1 with --ntasks-per-node): never spread over two
    one = {"b": MechanismJob("b", 4, ROW, node_count=1)}
    assert place_chosen([("b", ("b",), "v100")], one, nodes(2, 2)) == {}
    free = {"b": MechanismJob("b", 4, ROW)}
    assert len(place_chosen([("b", ("b",), "v100")], free, nodes(2, 2))["b"].nodes) == 2


def test_a_node_count_that_does_not_divide_the_gpus_or_differs_within_a_pair_waits():
    jobs = {
        "a": MechanismJob("a", 3, ROW, node_count=2),
        "b": MechanismJob("b", 2, ROW, node_count=2),
        "c": MechanismJob("c", 2, ROW),
    }
    assert place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 4)) == {}
    assert place_chosen([("b+c", ("b", "c"), "v100")], jobs, nodes(4, 4)) == {}


def test_the_lease_is_extended_only_on_the_layout_asked():
    two = (NodeSlice("v100-1", 1), NodeSlice("v100-2", 1))
    kept = JobPlacement("a", "v100", two)
    jobs = {"a": MechanismJob("a", 2, ROW, current=kept, node_count=2)}
    placed = place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 4))
    assert placed["a"] is kept
    # a run packed onto one node (placed before its layout was kept) is placed afresh
    packed = JobPlacement("a", "v100", (NodeSlice("v100-1", 2),))
    jobs = {"a": MechanismJob("a", 2, ROW, current=packed, node_count=2)}
    placed = place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 4))
    assert laid(placed["a"]) == [("v100-1", 1), ("v100-2", 1)]


def test_allowed_and_preferred_nodes_bind_the_layout():
    jobs = {
        "a": MechanismJob("a", 2, ROW, nodes=frozenset({"v100-2", "v100-3"}), node_count=2),
        "b": MechanismJob("b", 2, ROW, prefer=frozenset({"v100-3"}), node_count=2),
    }
    placed = place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 4, 4))
    assert sorted(s.node for s in placed["a"].nodes) == ["v100-2", "v100-3"]
    placed = place_chosen([("b", ("b",), "v100")], jobs, nodes(4, 4, 4))
    assert "v100-3" in {s.node for s in placed["b"].nodes}
    # its allowed nodes too few for its count: it waits
    jobs["a"] = MechanismJob("a", 2, ROW, nodes=frozenset({"v100-2"}), node_count=2)
    assert place_chosen([("a", ("a",), "v100")], jobs, nodes(4, 4, 4)) == {}
