"""`slurm-gavel explain JOBID`: why a managed job waits, runs where it runs, or moved.

From the daemon's public view (status.json, as `status`): the round's decision
for the job and its reason (the same line the daemon writes to the job's
AdminComment), then the figures behind it: its allocation per GPU type, the
time it received on each since the allocation was computed, its priority there
(Gavel's: allocation / share of time received; the mechanism fills each type's
GPUs in priority order) and its deficit (allocation x elapsed - received), and
the job's own throughput row: each cell measured, prior, estimated or
type-blind, with the seconds of measurement behind it.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from slurm_gavel.commands.jsonout import add_json_option, to_stdout, write_json
from slurm_gavel.commands.mold_text import explain_lines, gpus_cell
from slurm_gavel.commands.status import (
    HIDDEN_BY_PRIVACY,
    add_source_options,
    load_view,
    printable,
    state_dir,
)
from slurm_gavel.commands.status_fields import slurm_time
from slurm_gavel.commands.status_throughput import cell_text, reports_nothing
from slurm_gavel.daemon.status_view import clock_value, is_protected, job_figures
from slurm_gavel.errors import InputError

SUMMARY = "why a managed job waits or moved: its allocation, priority and the decision"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Explain the daemon's last decision for one managed job: where it runs or why it
    waits, its allocation per GPU type, the time received there since the
    allocation was computed, its priority and deficit on each type. Reads the
    daemon's public view; any user can run it (for their own jobs only where the
    view is private). Put --json after JOBID."""
    p.add_argument("jobid", metavar="JOBID", help="the Slurm job id of a managed job")
    add_source_options(p)
    add_json_option(p, "the job's record from the view")


def run(args: argparse.Namespace) -> int:
    view, warnings = load_view(state_dir(args))
    job = next((j for j in view["jobs"] if j["id"] == args.jobid), None)
    notice = next((n for n in view.get("notices") or [] if n.get("id") == args.jobid), None)
    if job is None and notice is not None:
        return explain_notice(args, view, notice, warnings)
    if job is None and view.get("user_id") is not None:
        raise InputError(
            f"job {args.jobid} is not one of your managed jobs in the daemon's view of round "
            f"{view['round']}: {HIDDEN_BY_PRIVACY}"
        )
    if job is None:
        raise InputError(
            f"job {args.jobid} is not in the daemon's view of round {view['round']}: it is "
            "not managed (no gavel: comment, or another partition), finished, or newer than "
            "the last round (`squeue -j` shows it)"
        )
    if args.json:
        write_json(args.json, {"job": job, "round": view["round"], "policy": view.get("policy"),
                               "allocation_age_s": view.get("allocation_age_s"),
                               "warnings": warnings})  # fmt: skip
        if to_stdout(args):
            return 0
    for w in warnings:
        print(f"slurm-gavel explain: warning: {w}", file=sys.stderr)
    sys.stdout.write(format_explain(printable(job), view))
    return 0


def explain_notice(
    args: argparse.Namespace, view: dict[str, Any], notice: dict[str, Any], warnings: list[str]
) -> int:
    """A job the daemon no longer manages (given back to Slurm, ended) with what it
    told its owner about how its runs ended (daemon/run_watch.py)."""
    if args.json:
        write_json(args.json, {"notice": notice, "round": view["round"], "warnings": warnings})
        if to_stdout(args):
            return 0
    for w in warnings:
        print(f"slurm-gavel explain: warning: {w}", file=sys.stderr)
    n = printable(notice)
    print(f"job {n['id']}: {n['kind'] or 'notice'} (no longer scheduled by the daemon)")
    print(f"  why: {n['why']}")
    return 0


def protection_lines(job: dict[str, Any], view: dict[str, Any]) -> list[str]:
    """Restart-aware rounds: how much longer its run is kept where it is, and why.
    The figures are checked again here: a view under status.d may be anyone's file."""
    until = clock_value(job.get("protected_until"))
    now = clock_value(view.get("last_round_time"))
    if until is None or now is None or not is_protected(until, now):
        return []
    cost = job.get("restart_cost_s")
    measured = (
        f"its restarts cost {slurm_time(cost)} as measured, "
        if clock_value(cost) is not None
        else ""
    )
    return [
        f"restart-aware: this run is kept where it is for {slurm_time(until - now)} more "
        f"after the last round ({measured}each run is kept until it has paid for its "
        "restart: restart cost / restart_budget, longer for a job that has run long)"
    ]


def _number(x: Any) -> float:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else 0.0


def _prio(p: float | None) -> str:
    return "inf" if p is None else f"{p:.3g}"


def format_explain(job: dict[str, Any], view: dict[str, Any]) -> str:
    types = list(view.get("capacity") or {}) or sorted(
        {*job["allocation"], *job["paired_allocation"], *job["received_s"]}
    )
    age = clock_value(view.get("allocation_age_s")) or 0.0
    # computed here from the record, as the mechanism ranked it (not in the file)
    priorities, deficits = job_figures(job, age)
    lines = [
        f"job {job['id']} ({job.get('user') or job.get('user_id') or '?'}, account "
        f"{job.get('account') or '-'}): {job.get('job_type') or '(no job type)'} on "
        f"{gpus_cell(job)} GPU(s), state {job.get('state')}",
        f"round {view['round']}, policy {view.get('policy')}: {job.get('why')}",
    ]
    if job.get("reason"):
        lines.append(f"  scheduler's note: {job['reason']}")
    lines.append(
        f"allocation in force for {slurm_time(age)}; priority = allocation / share of that "
        "time received (inf: allocated there, not run there since), deficit = allocation "
        "x time - received"
    )
    head = f"  {'GPU type':<12} {'alloc':>6} {'paired':>6} {'received':>11} {'priority':>9}"
    head += f" {'deficit':>10}"
    lines.append(head)
    for t in types:
        # the view may be anyone's file (status.d): a figure not a number shows as 0
        x = _number(job["allocation"].get(t))
        paired = _number(job["paired_allocation"].get(t))
        got = _number((job.get("epoch_received_s") or {}).get(t))
        prio = priorities.get(t, 0.0) if t in job["allocation"] else 0.0
        deficit = deficits.get(t, 0.0)
        sign = "-" if deficit < 0 else ""
        lines.append(
            f"  {t:<12} {x:>6.2f} {paired:>6.2f} {slurm_time(got):>11} {_prio(prio):>9} "
            f"{sign + slurm_time(abs(deficit)):>10}"
        )
    total = " + ".join(f"{t} {slurm_time(job['received_s'].get(t, 0.0))}" for t in types)
    lines.append(
        f"time received in all: {slurm_time(job.get('time_s'))} ({total}); "
        f"{job.get('restarts', 0)} restart(s), placed in {job.get('rounds', 0)} round(s)"
    )
    if job.get("gpu_type"):
        nodes = ",".join(f"{n}" if g == 1 else f"{n}x{g}" for n, g in job.get("nodes") or [])
        lines.append(f"placement: {job['gpu_type']} on {nodes}")
    lines += protection_lines(job, view)
    lines += explain_lines(job)
    cells = job.get("throughput") or {}
    if cells:
        note = " (no reports yet: on its prior)" if reports_nothing(cells) else ""
        lines.append(f"its throughput row, the policy's figures for it{note}:")
        lines += [f"  {t:<12} {cell_text(c)}" for t, c in sorted(cells.items())]
    return "\n".join(lines) + "\n"
