"""The stretch LP of ftf_solver.py over single jobs, by decomposition (dw.py).

With per-job throughput rows every job is its own class, and the class stretch
LP (one requirement row per job, ~3N columns) costs HiGHS 1-1.3 s at 10,000 jobs
(IPM + crossover for the first solve). Per job the requirement is simply
a_j . x_j >= w_j(theta) with sum_t x_jt <= 1: exactly dw.py's polytope Q_j(w_j),
so beta(theta) = min beta s.t. x_j in Q_j, sum_j s_j x_j <= beta cap is
dw.min_beta, with the same certificate (the restricted LP's objective meets a
Lagrangian bound to dw.CHECK_REL_GAP) and the same slope (the picked vertices'
d/dw priced at the optimal capacity prices). The Newton loop of
ftf_solver.minimise_stretch is unchanged; each solve starts from the previous
theta's prices. Every HiGHS run gets what is left of the caller's Deadline
(deadline.py); past it, SolverError (dw.py).
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.policies.solvers.deadline import NO_DEADLINE, Deadline
from slurm_gavel.policies.solvers.dw import min_beta, vertices, worth_decomposing

#: From this many jobs in the objective (and at most dw.DW_MAX_TYPES types) the
#: stretch LP is solved by decomposition when the jobs form (almost) no classes.
#: Below it, or with few classes, HiGHS's class LP (the simulator's results stay
#: bit for bit).
DW_MIN_JOBS = 2000
#: ... and when the class LP would have at least this many rows per 10 jobs (one
#: requirement row per distinct speed of a class: close to one per job when no
#: two jobs are alike).
DW_MIN_CLASS_SHARE = 0.5


def use_decomposition(n_members: int, n_classes: int, n_types: int) -> bool:
    return worth_decomposing(n_members, n_classes, n_types, DW_MIN_JOBS, DW_MIN_CLASS_SHARE)


class DwStretch:
    """beta(theta) for the jobs `members`, one unit per job (see the module docstring)."""

    def __init__(
        self,
        tput: np.ndarray,
        scale: np.ndarray,
        capacity: np.ndarray,
        deadline: Deadline = NO_DEADLINE,
    ) -> None:
        self.a = tput
        self.allowed = tput > 0
        self.best = tput.max(axis=1)
        self.gpus = scale
        self.cap = capacity.astype(np.float64)
        self.lam: np.ndarray | None = None
        self.deadline = deadline

    def solve(self, w: np.ndarray, dw: np.ndarray) -> tuple[float, np.ndarray, float]:
        """(beta, x (N, K) meeting w on beta * cap, d beta / d theta along dw)."""
        # theta >= its lower bound lets every job meet w alone on its best type; the
        # clip only absorbs rounding at that bound.
        w = np.minimum(w, self.best)
        verts = vertices(self.a, self.allowed, w)
        res = min_beta(verts, self.gpus, self.cap, dw=dw, lam0=self.lam, deadline=self.deadline)
        self.lam = res.lam
        return res.beta, res.x, res.slope
