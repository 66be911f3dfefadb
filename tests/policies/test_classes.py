"""The one job-class grouping (policies/solvers/classes.py) and the keys each family uses."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.policies.solvers.classes import (
    PolicyInputError,
    group,
    group_jobs,
    group_rows,
    job_arrays,
)

CLUSTER = {"v100": 4, "k80": 2}


def test_classes_are_numbered_by_first_job_and_masked_jobs_have_none() -> None:
    keys = np.array([[2.0], [1.0], [2.0], [3.0], [1.0], [-0.0], [0.0]])
    mask = np.array([True, True, True, False, True, True, True])
    c = group_rows(keys, mask)
    assert c.of_job.tolist() == [0, 1, 0, -1, 1, 2, 2]  # -0.0 and 0.0 are one value
    assert [m.tolist() for m in c.members] == [[0, 2], [1, 4], [5, 6]]
    assert c.first.tolist() == [0, 1, 5]
    assert c.count.tolist() == [2.0, 2.0, 2.0]
    assert len(group_rows(keys, np.zeros(7, dtype=bool))) == 0


def test_each_family_keys_on_what_its_lp_reads(make_problem) -> None:
    # Jobs 0 and 1 differ only on k80, where 4 GPUs do not fit: one class for the
    # deadline policies (no time there either way), two for the max-min family, which
    # keys on the row as given. Job 2 differs from job 0 only by its job type.
    p = make_problem(
        CLUSTER,
        [
            ("a", {"v100": 1.0, "k80": 0.5}, 4, 1.0),
            ("a", {"v100": 1.0, "k80": 0.7}, 4, 1.0),
            ("b", {"v100": 1.0, "k80": 0.5}, 4, 1.0),
            ("a", {"v100": 1.0, "k80": 0.5}, 4, 2.0),
        ],
    )
    assert group(job_arrays(p)).of_job.tolist() == [0, 0, 0, 0]
    weighted = group(job_arrays(p), extra=job_arrays(p).weight[:, None])
    assert weighted.of_job.tolist() == [0, 0, 0, 1]
    assert group_jobs(p).job_class.tolist() == [0, 1, 0, 2]
    packed = group_jobs(p, by_job_type=True)
    assert packed.job_class.tolist() == [0, 1, 2, 3]
    assert packed.job_type == ["a", "a", "b", "a"]
    assert packed.throughput[1].tolist() == [1.0, 0.7]


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (("a", {"v100": float("nan")}, 1, 1.0), "job 0: throughput on v100 is nan"),
        (("a", {"v100": 1.0}, 0, 1.0), "job 0: scale_factor 0 must be >= 1"),
        (("a", {"v100": 1.0}, 1, 0.0), "job 0: priority_weight 0.0 must be > 0"),
    ],
)
def test_every_family_rejects_the_same_bad_values(make_problem, job: tuple, message: str) -> None:
    p = make_problem(CLUSTER, [job])
    for build in (job_arrays, group_jobs):
        with pytest.raises(PolicyInputError, match=message):
            build(p)
