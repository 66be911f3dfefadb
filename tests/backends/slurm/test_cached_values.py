"""Cached GPU counts of frozen nodes and placements equal the computed ones."""

from __future__ import annotations

import dataclasses

from slurm_gavel.domain.cluster_model import JobPlacement, Node, NodeSlice, NodeState


def test_usable_gpus_is_cached_per_instance_and_recomputed_on_replace() -> None:
    n = Node("a", "v100", 4, gpus_held_unmanaged=1)
    assert n.usable_gpus == 3 and n.usable_gpus == 3
    assert dataclasses.replace(n, state=NodeState.DRAINED).usable_gpus == 0
    assert dataclasses.replace(n, gpus_held_unmanaged=0).usable_gpus == 4
    assert n == Node("a", "v100", 4, gpus_held_unmanaged=1)  # the cache is not a field


def test_placement_gpus_sums_slices() -> None:
    p = JobPlacement("1", "v100", (NodeSlice("a", 2), NodeSlice("b", 3)))
    assert p.gpus == 5 and p.gpus == 5
    q = JobPlacement("1", "v100", (NodeSlice("a", 2), NodeSlice("b", 3)))
    assert p == q and p.to_json() == q.to_json()
    assert JobPlacement.from_json(p.to_json()).gpus == 5


def test_observed_job_init_takes_exactly_the_dataclass_fields_with_their_defaults() -> None:
    """ObservedJob writes its __init__ by hand (speed); it must not drift from the
    declared fields: same names, same order, same defaults, still frozen."""
    import inspect

    import pytest

    from slurm_gavel.domain.cluster_model import JobState, ObservedJob
    from slurm_gavel.domain.model import Job

    params = list(inspect.signature(ObservedJob.__init__).parameters.values())[1:]
    fields = dataclasses.fields(ObservedJob)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        expected = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == expected, f.name
    o = ObservedJob(Job("a", "x"), JobState.PENDING)
    assert o == dataclasses.replace(o) and hash(o) == hash(dataclasses.replace(o))
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.restarts = 1  # type: ignore[misc]
