"""Which path each decomposable LP of one allocation took, and why it fell back.

The decompositions (dw.py and its users: mm_lp, ftf_solver, cost_dw, hier_dw,
hier_parametric) return only certified answers; otherwise the caller solves the plain
LP. Both outcomes are recorded here: `decomposed(lp)` when the certified answer is
used, `fell_back(lp, reason, detail)` when the plain LP runs instead, which also logs
one line with the reason (logging is the only I/O a policy does). The record is the
one `recording()` opened around the policy call (policies.allocate), kept in a
ContextVar so that calls in other threads do not mix; policies.allocate copies it
onto the Allocation, where the daemon counts fallbacks (daemon/metrics.py) and
benchmarks/bench_allocate.py reports them. Outside `recording()` only the log line
is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from slurm_gavel.domain.model import SolverFallback

log = logging.getLogger(__name__)


@dataclass
class SolvePaths:
    decomposed: list[str] = field(default_factory=list)
    fallbacks: list[SolverFallback] = field(default_factory=list)


_current: ContextVar[SolvePaths | None] = ContextVar("slurm_gavel_solve_paths", default=None)


@contextmanager
def recording() -> Iterator[SolvePaths]:
    """Record the paths of the LPs solved inside the block (nested: the inner one)."""
    paths = SolvePaths()
    token = _current.set(paths)
    try:
        yield paths
    finally:
        _current.reset(token)


def decomposed(lp: str) -> None:
    """`lp` was solved by decomposition, its certificate met."""
    paths = _current.get()
    if paths is not None:
        paths.decomposed.append(lp)


def fell_back(lp: str, reason: str, detail: str, *, expected: bool = False) -> None:
    """`lp` goes to the plain LP: `lp` and `reason` fixed codes (max_min, max_sum,
    stretch, min_cost, hier_first_level, hier_path; dw.REASONS and a few more), `detail`
    the message. Logged
    at WARNING (a decomposition that could not certify its answer), at INFO when
    `expected` (the decomposition does not apply to this input, e.g. SLOs that cannot
    all be met, where the plain LP names the jobs short)."""
    log.log(
        logging.INFO if expected else logging.WARNING,
        "%s LP: the decomposition has no certified answer, the plain LP runs (%s): %s",
        lp,
        reason,
        detail,
    )
    paths = _current.get()
    if paths is not None:
        paths.fallbacks.append(SolverFallback(lp, reason, detail))
