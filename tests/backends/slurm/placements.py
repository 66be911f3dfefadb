"""A round's placement written compactly, for the tests of the Slurm backend."""

from __future__ import annotations

from slurm_gavel.domain.cluster_model import JobPlacement, NodeSlice, RoundPlacement


def placement(round_index: int, jobs: dict[str, tuple[str, list[tuple[str, int]]]]):
    """{job: (gpu type, [(node, gpus), ...])} -> the round's placement."""
    return RoundPlacement(
        round_index,
        0.0,
        {
            j: JobPlacement(j, t, tuple(NodeSlice(n, g) for n, g in slices))
            for j, (t, slices) in jobs.items()
        },
    )
