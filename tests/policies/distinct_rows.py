"""Problems whose jobs are all different, for the tests of the class-free solve paths.

Imported as a plain module: pytest puts this folder on sys.path (tests/ is not a package).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from slurm_gavel.domain.model import Problem


def jitter_rows(p: Problem, seed: int, **extra: Any) -> Problem:
    """`p` with every job's throughput times its own factor in [0.8, 1.2], drawn from
    `seed`: no two jobs alike, so each is a class of its own. `extra` replaces other
    fields of the problem."""
    rng = np.random.default_rng(seed)
    jobs = tuple(
        dataclasses.replace(
            j, throughput={t: v * float(rng.uniform(0.8, 1.2)) for t, v in j.throughput.items()}
        )
        for j in p.jobs
    )
    return dataclasses.replace(p, jobs=jobs, **extra)
