"""Which of a round's placements the simulated cluster carries out
(backends/sim_placement.py), with the reason for each refused one."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.backends.sim_placement import all_of_type, validate
from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice
from slurm_gavel.domain.model import Job

RESNET = "ResNet-50 (batch size 64)"
NODE_TYPE = {"v100-000": "v100", "v100-001": "v100", "k80-000": "k80"}
USABLE = {"v100-000": 4, "v100-001": 4, "k80-000": 4}


@dataclass
class _Active:
    job: Job
    placement: JobPlacement | None = None


def _p(job_id, nodes, gpu="v100", partner=None):
    return JobPlacement(job_id, gpu, tuple(NodeSlice(n, g) for n, g in nodes), partner, True)


def _active(*jobs: Job) -> dict[str, _Active]:
    return {j.id: _Active(j) for j in jobs}


def test_every_refusal_names_its_reason_and_the_rest_run():
    jobs = _active(
        Job("a", RESNET, 2, total_steps=1.0),
        Job("b", RESNET, 1, total_steps=1.0),
        Job("c", RESNET, 4, total_steps=1.0),
        Job("d", RESNET, 4, total_steps=1.0),
        Job("m", RESNET, 1, total_steps=1.0, scale_range=(1, 2)),
    )
    failed: list[tuple[str, str]] = []
    ok = validate(
        {
            "a": _p("a", [("v100-000", 1)]),  # wrong count
            "b": _p("b", [("k80-000", 1)]),  # k80 node for a v100 placement
            "c": _p("c", [("v100-000", 4)]),
            "d": _p("d", [("v100-000", 4)]),  # c took those GPUs
            "m": _p("m", [("v100-001", 2)]),  # within its range
            "x": _p("x", [("v100-001", 1)]),  # not active
        },
        jobs,
        USABLE,
        NODE_TYPE,
        failed,
    )
    assert sorted(ok) == ["c", "m"]
    reasons = dict(failed)
    assert reasons["a"] == "placed on 1 GPUs, needs 2"
    assert reasons["b"] == "nodes are not all v100"
    assert reasons["d"] == "not enough free GPUs on its nodes"
    assert reasons["x"] == "not an active job"
    m = _active(Job("m", RESNET, 1, total_steps=1.0, scale_range=(1, 2)))
    failed = []
    assert not validate({"m": _p("m", [("v100-001", 3)])}, m, USABLE, NODE_TYPE, failed)
    assert failed == [("m", "placed on 3 GPUs, needs 1-2")]


def test_a_pair_shares_one_set_of_gpus_and_runs_alone_when_its_partner_fails():
    jobs = _active(
        Job("a", RESNET, 4, total_steps=1.0),
        Job("b", RESNET, 4, total_steps=1.0),
        Job("c", RESNET, 4, total_steps=1.0),
    )
    pair = {
        "a": _p("a", [("v100-000", 4)], partner="b"),
        "b": _p("b", [("v100-000", 4)], partner="a"),
    }
    failed: list[tuple[str, str]] = []
    ok = validate(pair, jobs, USABLE, NODE_TYPE, failed)
    assert ok == pair and not failed  # the second of the pair holds no GPUs of its own
    lone = {
        "a": _p("a", [("v100-000", 4)], partner="c"),
        "c": _p("c", [("k80-000", 4)], partner="a"),  # wrong type: fails
    }
    ok = validate(lone, jobs, USABLE, NODE_TYPE, failed)
    assert ok["a"].partner is None and "c" not in ok


def test_a_kept_placement_skips_the_checks_it_passed_and_all_of_type():
    # the very object it runs on is not checked again (it passed when first acted on)
    job = Job("a", RESNET, 1, total_steps=1.0)
    kept = _p("a", [("v100-000", 2)])
    failed: list[tuple[str, str]] = []
    active = {"a": _Active(job, kept)}
    assert validate({"a": kept}, active, USABLE, NODE_TYPE, failed) == {"a": kept}
    # an equal new placement is
    assert validate({"a": _p("a", [("v100-000", 2)])}, active, USABLE, NODE_TYPE, failed) == {}
    assert failed == [("a", "placed on 2 GPUs, needs 1")]
    assert all_of_type(kept.nodes, NODE_TYPE, "v100")
    assert not all_of_type(kept.nodes, NODE_TYPE, "k80")
    assert not all_of_type((NodeSlice("gone", 1),), NODE_TYPE, "v100")
