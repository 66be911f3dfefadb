"""Allocation policies: one module each, looked up by the stable names of docs/design.md §2.2.

Every policy module exposes ``allocate(problem: Problem, options: PolicyOptions)
-> Allocation``: a pure function of plain data. Modules are imported on first
use, so `slurm-gavel status` does not pay for importing cvxpy.

This module is the policies' face to the round (slurm_gavel.core): the round imports
from here, never from a policy's module or the solvers behind them
(tests/test_layering.py). Besides the policies by name, that face holds the moldable
counts' LP (solvers/mold_lp.py), also imported on first use.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.errors import InputError
from slurm_gavel.policies.solvers.solve_paths import recording

if TYPE_CHECKING:
    from slurm_gavel.policies.solvers.mold_lp import (
        CountJob,
        allocate_counts,
        count_types,
        pick_counts,
    )


@dataclass(frozen=True)
class PolicyOptions:
    seed: int = 0  # for randomised baselines (gandiva)
    # True forces the plain cvxpy reference formulation instead of the fast path;
    # tests compare the two.
    reference: bool = False
    # Solver time limit in seconds for one allocation; None = no limit.
    time_limit: float | None = None
    # Max-min family: once the minimum is optimal, also maximise the total normalised
    # throughput (hands out capacity no job's minimum needs). False = Gavel's single
    # LP, whichever optimal vertex the solver returns: for ablations (EXPERIMENTS.md).
    second_stage: bool = True


PolicyFn = Callable[[Problem, PolicyOptions], Allocation]

# name -> module under slurm_gavel.policies; the names are a public contract.
POLICY_MODULES: dict[str, str] = {
    "max_min_fairness": "max_min_fairness",
    "max_min_fairness_agnostic": "max_min_fairness_agnostic",
    "max_min_fairness_packed": "max_min_fairness_packed",
    "finish_time_fairness": "finish_time_fairness",
    "min_total_duration": "min_total_duration",
    "max_sum_throughput": "max_sum_throughput",
    "fifo": "fifo",
    "fifo_agnostic": "fifo_agnostic",
    "min_cost": "min_cost",
    "hierarchical_max_min_fairness": "hierarchical_max_min_fairness",
    "gandiva": "gandiva",
    "isolated": "isolated",
}

# Policies that read pair_throughputs (space sharing).
PACKING_POLICIES = frozenset({"max_min_fairness_packed", "gandiva"})


class UnknownPolicyError(InputError):
    pass


def policy_names() -> list[str]:
    return list(POLICY_MODULES)


def get_policy(name: str) -> PolicyFn:
    if name not in POLICY_MODULES:
        raise UnknownPolicyError(
            f"unknown policy '{name}'; choose one of: {', '.join(POLICY_MODULES)}"
        )
    module = importlib.import_module(f"slurm_gavel.policies.{POLICY_MODULES[name]}")
    fn: PolicyFn = module.allocate
    return fn


def allocate(problem: Problem, name: str, options: PolicyOptions | None = None) -> Allocation:
    """Run a policy and record its honest solve time (model build + solve) and which
    path its LPs took (decomposition or plain LP, and every fallback: solve_paths.py)."""
    fn = get_policy(name)
    start = time.perf_counter()
    with recording() as paths:
        alloc = fn(problem, options or PolicyOptions())
    alloc.solve_seconds = time.perf_counter() - start
    alloc.policy = name
    alloc.decomposed = list(paths.decomposed)
    alloc.fallbacks = list(paths.fallbacks)
    return alloc


# What the round takes from the solvers besides the policies: name -> its module, imported
# on first use (PEP 562) like the policies, so importing this package stays light.
_SOLVER_NAMES = {
    "CountJob": "slurm_gavel.policies.solvers.mold_lp",
    "allocate_counts": "slurm_gavel.policies.solvers.mold_lp",
    "count_types": "slurm_gavel.policies.solvers.mold_lp",
    "pick_counts": "slurm_gavel.policies.solvers.mold_lp",
}


def __getattr__(name: str) -> Any:
    if name in _SOLVER_NAMES:
        return getattr(importlib.import_module(_SOLVER_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PACKING_POLICIES",
    "POLICY_MODULES",
    "CountJob",
    "PolicyFn",
    "PolicyOptions",
    "UnknownPolicyError",
    "allocate",
    "allocate_counts",
    "count_types",
    "get_policy",
    "pick_counts",
    "policy_names",
]
