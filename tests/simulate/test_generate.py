"""The trace generator follows Gavel's distributions and is seeded."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from slurm_gavel.domain.throughputs import ThroughputTable, load_table
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.generate import generate_trace, reference_throughput

TABLE = load_table()


def test_same_seed_same_trace_other_seed_other_trace():
    a = generate_trace(50, 600.0, TABLE, seed=1, multi_gpu=True)
    assert a == generate_trace(50, 600.0, TABLE, seed=1, multi_gpu=True)
    assert a != generate_trace(50, 600.0, TABLE, seed=2, multi_gpu=True)


def test_distributions():
    jobs = generate_trace(4000, 600.0, TABLE, seed=0, multi_gpu=True)
    arrivals = np.array([j.arrival_time for j in jobs])
    assert arrivals[0] == 0.0 and np.all(np.diff(arrivals) >= 0)
    assert np.diff(arrivals).mean() == pytest.approx(600.0, rel=0.06)
    distributed = [j for j in jobs if max(TABLE.scale_factors(j.job_type)) > 1]
    sizes = Counter(j.scale_factor for j in distributed)
    for sf, p in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert sizes[sf] / len(distributed) == pytest.approx(p, abs=0.03)
    assert all(j.scale_factor == 1 for j in jobs if j not in distributed)
    minutes = np.array(
        [j.total_steps / reference_throughput(TABLE, j.job_type, j.scale_factor) / 60 for j in jobs]
    )
    logs = np.log10(minutes)
    assert logs.min() >= 1.5 - 1e-3 and logs.max() <= 4 + 1e-3
    assert np.mean(logs < 3) == pytest.approx(0.8, abs=0.03)
    assert len({j.job_type for j in jobs}) == len(TABLE.job_types)


def test_single_gpu_by_default_and_options():
    jobs = generate_trace(300, 60.0, TABLE, seed=0, priorities=True, slos=True, accounts=("a", "b"))
    assert {j.scale_factor for j in jobs} == {1}
    assert {j.priority_weight for j in jobs} == {1.0, 5.0}
    assert {j.account for j in jobs} == {"a", "b"}
    for j in jobs:
        duration = j.total_steps / reference_throughput(TABLE, j.job_type, 1)
        assert any(math.isclose(j.slo, k * duration, rel_tol=1e-3) for k in (1.2, 2.0, 10.0))


def test_bad_arguments():
    with pytest.raises(InputError, match="at least 1"):
        generate_trace(0, 60.0, TABLE)
    with pytest.raises(InputError, match="> 0"):
        generate_trace(5, 0.0, TABLE)


def test_size_first_draws_the_philly_mix_over_all_jobs_like_gavels_default():
    """Gavel's generate_job (always_generate_scale_factor=True): the size from the mix,
    then a type that has it, so sizes follow the mix over every job (~1.9 GPUs/job)."""
    jobs = generate_trace(4000, 600.0, TABLE, seed=0, multi_gpu=True, size_first=True)
    sizes = Counter(j.scale_factor for j in jobs)
    for sf, p in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert sizes[sf] / len(jobs) == pytest.approx(p, abs=0.03)
    assert np.mean([j.scale_factor for j in jobs]) == pytest.approx(1.9, abs=0.08)
    assert all(TABLE.has(j.job_type, j.scale_factor) for j in jobs)
    # single-GPU jobs come from all types, multi-GPU ones only from those that scale
    assert len({j.job_type for j in jobs if j.scale_factor == 1}) == len(TABLE.job_types)
    assert {j.job_type for j in jobs if j.scale_factor == 8} <= {
        t for t in TABLE.job_types if TABLE.has(t, 8)
    }
    # the type-first default is unchanged by the option's existence, and it is seeded
    assert jobs == generate_trace(4000, 600.0, TABLE, seed=0, multi_gpu=True, size_first=True)
    assert {j.scale_factor for j in generate_trace(50, 60.0, TABLE, size_first=True)} == {1}


def test_size_first_leaves_out_sizes_no_job_type_has():
    no_eight = ThroughputTable(alone={k: v for k, v in TABLE.alone.items() if k[1] != 8})
    jobs = generate_trace(2000, 60.0, no_eight, multi_gpu=True, size_first=True)
    assert {j.scale_factor for j in jobs} == {1, 2, 4}
    jobs = generate_trace(500, 60.0, TABLE, multi_gpu=True, size_first=True, max_scale_factor=2)
    assert {j.scale_factor for j in jobs} == {1, 2}
    only_two = ThroughputTable(alone={k: v for k, v in TABLE.alone.items() if k[1] == 2})
    with pytest.raises(InputError, match="no job type at any of the sizes"):
        generate_trace(5, 60.0, only_two, multi_gpu=True, size_first=True, max_scale_factor=1)
