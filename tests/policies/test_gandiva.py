"""gandiva: deterministic for a seed, pairs only compatible jobs, equal shares, feasible."""

from __future__ import annotations

import pytest

from slurm_gavel.policies import PolicyOptions, allocate
from slurm_gavel.simulate.synthetic import random_problem


def _busy(seed: int = 0, n: int = 120):
    return random_problem(n, 6, seed=seed, with_pairs=True)  # demand far above 18 GPUs


def test_deterministic_for_a_seed() -> None:
    p = _busy()
    a = allocate(p, "gandiva", PolicyOptions(seed=3))
    b = allocate(p, "gandiva", PolicyOptions(seed=3))
    assert a.pairs == b.pairs and a.fractions == b.fractions
    assert a.pairs  # the check is not vacuous


def test_different_seeds_pair_differently() -> None:
    p = _busy()
    pairings = {
        frozenset(s.jobs for s in allocate(p, "gandiva", PolicyOptions(seed=s)).pairs)
        for s in range(5)
    }
    assert len(pairings) > 1


def test_pairs_are_compatible_and_disjoint() -> None:
    p = _busy(seed=1)
    alloc = allocate(p, "gandiva", PolicyOptions(seed=1))
    entries = {(e.a, e.b, e.scale_factor) for e in p.pair_throughputs}
    seen: set[str] = set()
    for share in alloc.pairs:
        a, b = (p.job(j) for j in share.jobs)
        assert a.scale_factor == b.scale_factor
        key = (a.job_type, b.job_type, a.scale_factor)
        assert key in entries or (key[1], key[0], key[2]) in entries
        assert not seen & set(share.jobs)
        seen |= set(share.jobs)
        for j in share.jobs:  # paired jobs have no single time
            assert sum(alloc.fractions[j].values()) == 0.0
    assert alloc.violations(p) == []


def test_no_packing_when_demand_fits(make_problem) -> None:
    p = make_problem(
        {"v": 4},
        [("A", {"v": 1}, 1, 1), ("B", {"v": 1}, 1, 1)],
        pairs=[("A", "B", 1, {"v": (0.9, 0.9)})],
    )
    alloc = allocate(p, "gandiva")
    assert alloc.pairs == []
    assert alloc.fractions == allocate(p, "isolated").fractions


def test_useless_pairs_are_split(make_problem) -> None:
    # Packed each job runs at 0.1 of its speed: 0.1 + 0.1 < 1, so never paired.
    p = make_problem(
        {"v": 1},
        [("A", {"v": 1}, 1, 1), ("B", {"v": 1}, 1, 1), ("A", {"v": 1}, 1, 1)],
        pairs=[("A", "B", 1, {"v": (0.1, 0.1)}), ("A", "A", 1, {"v": (0.1, 0.1)})],
    )
    for seed in range(5):
        alloc = allocate(p, "gandiva", PolicyOptions(seed=seed))
        assert alloc.pairs == []
        assert all(alloc.fractions[j.id]["v"] == pytest.approx(1 / 3) for j in p.jobs)
