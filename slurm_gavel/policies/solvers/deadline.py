"""The solver time limit (PolicyOptions.time_limit) across the many HiGHS solves of one path.

The plain LP paths hand the limit to one HiGHS instance, whose clock counts every run
of that instance (a warm re-solve spends what is left of the same limit). The
decomposition paths (dw.py: its master and restricted LPs, fresh instances, many per
solve) and a fallback after a stalled decomposition read what is left from a
Deadline started with the path. Once it has passed they stop with a SolverError, as
HiGHS's own limit makes the plain paths stop (the round fails and the last allocation
stands). With no limit the clock is never read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import highspy

from slurm_gavel.policies.solvers.lp import SolverError


@dataclass(frozen=True)
class Deadline:
    """`limit` seconds after `start` on `clock` (limit None: never) for the path `what`
    (named in the error)."""

    limit: float | None
    clock: Callable[[], float]
    start: float
    what: str

    @classmethod
    def after(
        cls, limit: float | None, what: str, clock: Callable[[], float] = time.monotonic
    ) -> Deadline:
        return cls(limit, clock, clock() if limit is not None else 0.0, what)

    def remaining(self) -> float | None:
        """Seconds left (0 once passed); None without a limit."""
        if self.limit is None:
            return None
        return max(self.limit - (self.clock() - self.start), 0.0)

    def check(self) -> float | None:
        """Seconds left; SolverError once none are."""
        left = self.remaining()
        if left is not None and left <= 0.0:
            raise self.reached()
        return left

    def reached(self) -> SolverError:
        return SolverError(
            f"{self.what}: the solver time limit of {self.limit:g} s was reached; no allocation "
            "returned (raise solver_time_limit_seconds, or leave it out for no limit)"
        )

    def arm(self, h: Any) -> None:
        """Before a run of HiGHS instance `h`: SolverError if no time is left, else its
        limit set to what is left (HiGHS's limit counts all of the instance's runs)."""
        left = self.check()
        if left is not None:
            h.setOptionValue("time_limit", float(h.getRunTime()) + left)

    def run(self, h: Any) -> Any:  # highspy.HighsModelStatus
        """Run HiGHS instance `h` within what is left; SolverError once that has passed
        (before the run, or HiGHS stopped at it). Other statuses are the caller's."""
        self.arm(h)
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kTimeLimit and self.limit is not None:
            raise self.reached()
        return status


NO_DEADLINE = Deadline(None, time.monotonic, 0.0, "solver")
