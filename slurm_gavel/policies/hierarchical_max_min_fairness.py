"""hierarchical_max_min_fairness: weighted max-min across Slurm accounts and inside each.

Entities are Slurm accounts (ProblemJob.account; jobs without one form the
entity "(none)"), weighted by Problem.accounts (an entity missing there gets
weight 1.0 and a note). The policy is Gavel's hierarchical water filling
(MaxMinFairnessWaterFillingPolicyWithPerf with 'fairness' reweighting for every
entity): see hier_water_filling for the algorithm. Normalised throughput is
Gavel's: rate_j / P_j with P_j = sum_t T_jt cap_t / sum_t cap_t, and the level of
job j rises by c * w'_j / s_j per unit of the common level c, where w'_j is its
share of its entity's weight. Where nobody is bottlenecked, entities with
weights 2:1 get 2:1 of sum_j s_j * rate_j / P_j over their jobs (for 1-GPU jobs:
of their normalised throughput); capacity a bottlenecked job cannot use flows
to the others (water filling).

The reported objective is the first iteration's level (the weighted max-min
value). Fast path: class-level LPs in HiGHS (hier_water_filling); with many distinct
jobs the levels where only time rows bind are replayed without LPs and the first
capacity level is found and proven by decomposition (hier_parametric). Reference
(options.reference): the same water filling per job in cvxpy, with bottlenecks
found by one LP per job (can it rise with everyone else held?). Neither path
ever falls back to plain max-min: failures raise WaterFillingError.
"""

from __future__ import annotations

import numpy as np

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.classes import JobArrays, fractions_dict, group, job_arrays
from slurm_gavel.policies.solvers.hier_water_filling import (
    MARGIN,
    MARGIN_FLOOR,
    HierClasses,
    WaterFillingError,
    effective_weights,
    water_fill,
)

NAME = "hierarchical_max_min_fairness"
NO_ACCOUNT = "(none)"


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    arrays = job_arrays(problem)
    cap_total = float(arrays.capacity.sum())
    raw = arrays.raw_throughput  # P_j counts every type, as Gavel (and max_min_fairness) do
    share = raw @ arrays.capacity / cap_total if cap_total > 0 else np.zeros(len(problem.jobs))
    with np.errstate(divide="ignore", invalid="ignore"):
        coef = np.where(share[:, None] > 0, arrays.throughput / share[:, None], 0.0)
    names = [j.account if j.account else NO_ACCOUNT for j in problem.jobs]
    entities = list(dict.fromkeys(names))
    entity_of = {e: i for i, e in enumerate(entities)}
    missing = [e for e in entities if e not in problem.accounts]
    weights = np.array([float(problem.accounts.get(e, 1.0)) for e in entities])
    notes = []
    if missing:
        notes.append(
            f"no weight for account(s) {', '.join(missing)}: weight 1.0 used "
            '(set weights under "accounts" in the problem JSON or the daemon config)'
        )
    job_entity = np.array([entity_of[n] for n in names], dtype=np.int64)
    if options.reference:
        x, first = _reference(coef, arrays.scale, arrays.weight, job_entity, weights, arrays)
    else:
        classes = group(arrays, extra=np.column_stack([arrays.weight, job_entity, share]))
        hc = HierClasses(
            coef=coef[classes.first],
            scale=arrays.scale[classes.first],
            count=classes.count,
            weight=arrays.weight[classes.first],
            entity=job_entity[classes.first],
            entity_weight=weights,
            capacity=arrays.capacity,
        )
        res = water_fill(hc, time_limit=options.time_limit)
        x = res.x[classes.of_job] if len(problem.jobs) else np.zeros((0, len(arrays.types)))
        first = res.first_level
    return Allocation(NAME, fractions_dict(problem, arrays.types, x), objective=first, notes=notes)


def _reference(
    coef: np.ndarray,
    scale: np.ndarray,
    weight: np.ndarray,
    entity: np.ndarray,
    entity_weight: np.ndarray,
    arrays: JobArrays,
) -> tuple[np.ndarray, float]:
    """Per-job water filling in cvxpy; bottlenecks by one 'can it rise?' LP per job."""
    import cvxpy as cp  # only the reference path pays for importing cvxpy

    n, k = coef.shape
    if n == 0:
        return np.zeros((0, k)), 0.0
    per_job = HierClasses(coef, scale, np.ones(n), weight, entity, entity_weight, arrays.capacity)
    frozen = coef.max(axis=1, initial=0.0) <= 0
    level = np.zeros(n)
    x_val = np.zeros((n, k))
    first = 0.0
    free = cp.Variable((n, k), nonneg=True)
    x = cp.multiply((coef > 0).astype(float), free)
    value = cp.sum(cp.multiply(coef, x), axis=1)
    base = [cp.sum(x, axis=1) <= 1, scale @ x <= arrays.capacity]
    for it in range(n + 1):
        if frozen.all():
            break
        rise = np.where(frozen, 0.0, effective_weights(per_job, frozen) / scale)
        c = cp.Variable()
        prob = cp.Problem(cp.Maximize(c), [*base, value >= level + c * rise])
        prob.solve(solver=cp.HIGHS)
        if prob.status != cp.OPTIMAL or c.value is None:
            raise WaterFillingError(f"reference water filling: level LP status '{prob.status}'")
        c_star = float(c.value)
        first = c_star if it == 0 else first
        x_val = np.asarray(x.value)
        level = level + c_star * rise
        stuck = np.zeros(n, dtype=bool)
        for j in np.nonzero(~frozen)[0]:
            lift = cp.Problem(cp.Maximize(value[j]), [*base, value >= level])
            lift.solve(solver=cp.HIGHS)
            if lift.status != cp.OPTIMAL:
                raise WaterFillingError(f"reference water filling: lift LP status '{lift.status}'")
            stuck[j] = lift.value < level[j] + max(MARGIN * level[j], MARGIN_FLOOR)
        if not stuck.any():
            raise WaterFillingError("reference water filling made no progress")
        frozen |= stuck
    else:
        raise WaterFillingError("reference water filling did not finish")
    return np.clip(x_val, 0.0, 1.0), first
