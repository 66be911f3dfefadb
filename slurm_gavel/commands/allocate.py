"""`slurm-gavel allocate`: solve one allocation problem (DESIGN.md's problem JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from slurm_gavel.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions, allocate, policy_names
from slurm_gavel.problem import allocation_to_json, load_problem


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "allocate",
        help="compute one allocation for a problem file",
        description=(
            "Read an allocation problem (cluster, jobs with per-GPU-type throughputs, optional "
            "pair throughputs, account weights and prices; format in DESIGN.md) and print the "
            "fraction of time each job should spend on each GPU type."
        ),
    )
    p.add_argument("--problem", required=True, metavar="FILE", help="problem JSON file")
    p.add_argument(
        "--policy",
        default="max_min_fairness",
        metavar="NAME",
        help=f"policy (default max_min_fairness); one of: {', '.join(policy_names())}",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--seed", type=int, default=0, help="seed for randomised policies (gandiva)")
    p.add_argument(
        "--reference",
        action="store_true",
        help="use the plain cvxpy reference formulation instead of the fast path",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problem = load_problem(args.problem)
    alloc = allocate(problem, args.policy, PolicyOptions(seed=args.seed, reference=args.reference))
    if args.json:
        json.dump(allocation_to_json(alloc), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_table(problem, alloc))
    return 0


def format_table(problem: Problem, alloc: Allocation) -> str:
    """A readable table: one row per job, one column per GPU type, then its throughput."""
    types = problem.gpu_types
    id_w = max(6, *(len(j.id) for j in problem.jobs))
    type_w = min(34, max(8, *(len(j.job_type) for j in problem.jobs)))
    head = f"{'job':<{id_w}}  {'type':<{type_w}}  {'gpus':>4}  "
    head += "  ".join(f"{t:>7}" for t in types) + "  {:>8}  {:>10}".format("paired", "steps/s")
    lines = [
        f"policy {alloc.policy}: objective {alloc.objective!s}, "
        f"solved in {alloc.solve_seconds:.3f} s",
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
