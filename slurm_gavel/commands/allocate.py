"""`slurm-gavel allocate`: solve one allocation problem (docs/design.md §2.1)."""

from __future__ import annotations

import argparse
import sys

from slurm_gavel.commands.jsonout import add_json_option, to_stdout, write_json
from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.domain.problem import allocation_to_json, load_problem
from slurm_gavel.policies import PolicyOptions, allocate, policy_names

SUMMARY = "compute one allocation for a problem file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Read an allocation problem (cluster, jobs with per-GPU-type throughputs, optional
    pair throughputs, account weights and prices; format in docs/design.md
    section 2.1) and print the fraction of time each job should spend on each GPU
    type."""
    p.add_argument("--problem", required=True, metavar="FILE", help="problem JSON file")
    p.add_argument(
        "--policy",
        default="max_min_fairness",
        metavar="NAME",
        help=f"policy (default max_min_fairness); one of: {', '.join(policy_names())}",
    )
    add_json_option(p, "the allocation (fractions per job and GPU type, objective)")
    p.add_argument("--seed", type=int, default=0, help="seed for randomised policies (gandiva)")
    p.add_argument(
        "--reference",
        action="store_true",
        help="use the plain cvxpy reference formulation instead of the fast path",
    )


def run(args: argparse.Namespace) -> int:
    problem = load_problem(args.problem)
    alloc = allocate(problem, args.policy, PolicyOptions(seed=args.seed, reference=args.reference))
    if args.json:
        write_json(args.json, allocation_to_json(alloc))
        if to_stdout(args):
            return 0
    sys.stdout.write(format_table(problem, alloc))
    return 0


# What each policy's Allocation.objective measures (the policy modules' docstrings).
OBJECTIVE_LABELS = {
    "max_min_fairness": "minimum normalised throughput",
    "max_min_fairness_agnostic": "minimum normalised throughput, type-blind",
    "max_min_fairness_packed": "minimum normalised throughput",
    "hierarchical_max_min_fairness": "weighted max-min level (first iteration)",
    "max_sum_throughput": "total throughput, steps/s",
    "min_cost": "steps per dollar, summed over jobs",
    "finish_time_fairness": "largest finish-time fairness rho",
    "min_total_duration": "makespan, s",
    "fifo": "jobs placed",
    "fifo_agnostic": "jobs placed",
}


def objective_line(alloc: Allocation) -> str:
    """The objective labelled with what it measures, 4 significant digits."""
    label = OBJECTIVE_LABELS.get(alloc.policy, "objective")
    value = (
        "none (this policy has no objective)"
        if alloc.objective is None
        else (f"{alloc.objective:.4g}")
    )
    return f"policy {alloc.policy}: {label} = {value}, solved in {alloc.solve_seconds:.3f} s"


def format_table(problem: Problem, alloc: Allocation) -> str:
    """A readable table: one row per job, one column per GPU type, then its throughput."""
    types = problem.gpu_types
    id_w = max(6, *(len(j.id) for j in problem.jobs))
    type_w = min(34, max(8, *(len(j.job_type) for j in problem.jobs)))
    head = f"{'job':<{id_w}}  {'type':<{type_w}}  {'gpus':>4}  "
    head += "  ".join(f"{t:>7}" for t in types) + "  {:>8}  {:>10}".format("paired", "steps/s")
    lines = [
        objective_line(alloc),
        head,
        "-" * len(head),
    ]
    paired: dict[str, float] = {}
    for pair in alloc.pairs:
        for job_id in pair.jobs:
            paired[job_id] = paired.get(job_id, 0.0) + sum(pair.fractions.values())
    for j in problem.jobs:
        row = alloc.fractions.get(j.id, {})
        cells = "  ".join(f"{row.get(t, 0.0):>7.3f}" for t in types)
        lines.append(
            f"{j.id:<{id_w}}  {j.job_type[:type_w]:<{type_w}}  {j.scale_factor:>4}  {cells}  "
            f"{paired.get(j.id, 0.0):>8.3f}  {alloc.effective_throughput(problem, j.id):>10.3f}"
        )
    used = alloc.gpus_used(problem)
    lines.append("-" * len(head))
    lines.append(
        "GPUs in use: "
        + ", ".join(f"{t} {used.get(t, 0.0):.2f}/{problem.cluster[t]}" for t in types)
    )
    lines.extend(f"note: {n}" for n in alloc.notes)
    return "\n".join(lines) + "\n"
