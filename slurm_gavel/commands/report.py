"""`slurm-gavel report`: what the GPU jobs got, from sacct and the daemon's state."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from slurm_gavel.accounting.usage_report import GROUPS, add_fairness, job_facts, job_json, summarise
from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.backends.slurm.fields import typed_gpus
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.commands.jsonout import add_json_option, to_stdout, write_json
from slurm_gavel.commands.plotting import require_matplotlib
from slurm_gavel.commands.status import printable
from slurm_gavel.commands.trace import read_runs
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError

SUMMARY = "JCT, queueing delay, restarts, GPU-hours and fairness of past jobs (sacct)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Report what the GPU jobs sacct recorded got: job completion time, queueing delay,
    restarts (requeues), GPU-hours per GPU type and finish-time fairness (rho:
    JCT over the time on an equal share of the cluster; <= 1 is fair), per user,
    account or job type. --config/--state-dir add the daemon's restart counts and
    the cluster's GPUs."""
    p.add_argument("--since", default="now-7days", help="sacct -S (default now-7days)")
    p.add_argument("--until", help="sacct -E (default now)")
    p.add_argument("--partition", action="append", default=[], help="only this partition")
    p.add_argument("--input", metavar="FILE", help="saved `sacct -a -X -D --json` output")
    p.add_argument("--by", choices=GROUPS, help="one row per user, account or job type")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--config", metavar="FILE", help="the daemon config (its state_dir)")
    where.add_argument("--state-dir", metavar="DIR", help="the daemon's state directory")
    p.add_argument(
        "--capacity",
        metavar="TYPE=N,...",
        help="GPUs per type, for rho (default: the daemon's state, else sinfo)",
    )
    p.add_argument("--throughputs", metavar="FILE", help="throughput table (default shipped)")
    p.add_argument(
        "--restart-seconds",
        type=float,
        metavar="S",
        help="what a restart costs a job without a measured cost, for GPU-hours lost to "
        "restarts (default: the config's preemption_overhead_seconds when above 0)",
    )
    add_json_option(p, "the groups and every job")
    p.add_argument(
        "--plot",
        metavar="DIR",
        help="write PNG plots into DIR, each with its data as CSV beside it (needs matplotlib)",
    )


def _daemon_state(args: argparse.Namespace) -> dict[str, Any] | None:
    """The daemon's public view (status's), when --config or --state-dir names it."""
    if not (args.config or args.state_dir):
        return None
    from slurm_gavel.commands.status import load_view, state_dir

    view, warnings = load_view(state_dir(args))
    for line in warnings:
        print(f"slurm-gavel report: {line}", file=sys.stderr)
    return view


def _counts(raw: Any) -> dict[str, int]:
    """{GPU type: GPUs >= 0} of a view's field (status.json may be from another version)."""
    if not isinstance(raw, dict):
        return {}
    return {
        k: int(v)
        for k, v in raw.items()
        if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }


def parse_capacity(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in text.split(","):
        gpu, eq, n = part.strip().partition("=")
        if not eq or not gpu or not n.isdigit() or int(n) <= 0:
            raise InputError(f"--capacity: cannot read {part!r}; write TYPE=N,... e.g. v100=8")
        out[gpu] = int(n)
    return out


def sinfo_capacity(commands: SlurmCommands | None = None) -> dict[str, int]:
    """GPUs per type of every node sinfo lists (empty when sinfo fails). Through the
    command runner: retried while slurmctld is unreachable; a timeout is not (one
    minute, as long as a report should wait for a figure --capacity can give); an
    admin's SINFO_* shell defaults are dropped, as for the daemon's reads."""
    commands = commands or SlurmCommands(timeout=60)
    try:
        res = commands.run("sinfo", ["sinfo", "-h", "-N", "-o", "%N|%G"])
    except (SlurmUnreachable, OSError):  # not installed or runnable, not answering, timed out
        return {}
    seen: dict[str, dict[str, int]] = {}
    for line in res.stdout.splitlines() if res.ok else []:
        node, _, gres = line.partition("|")
        typed = typed_gpus(gres)
        if typed:
            seen.setdefault(node, {}).update(typed)
    cap: dict[str, int] = {}
    for per_node in seen.values():  # a node in several partitions is listed once each
        for gpu, n in per_node.items():
            cap[gpu] = cap.get(gpu, 0) + n
    return cap


def build(args: argparse.Namespace) -> dict[str, Any]:
    table = load_table(args.throughputs)
    daemon = _daemon_state(args)
    restarts = {j["id"]: int(j["restarts"]) for j in (daemon or {}).get("jobs", [])}
    measured = {
        j["id"]: float(j["restart_cost_s"])
        for j in (daemon or {}).get("jobs", [])
        if isinstance(j.get("restart_cost_s"), int | float)
        and not isinstance(j.get("restart_cost_s"), bool)
        and 0 <= j["restart_cost_s"] < 1e6
    }
    runs, unreadable = read_runs(args)
    facts = job_facts(runs, table, restarts, measured, _restart_seconds(args))
    if args.capacity:
        capacity = parse_capacity(args.capacity)
    elif daemon and (installed := _counts(daemon.get("gpus_installed"))):
        # the nodes' GPUs, not what the last round could use (a view from before
        # 2026-11-28 has only "capacity": that one then)
        capacity = installed
    elif daemon and (usable := _counts(daemon.get("capacity"))):
        capacity = usable
    else:
        capacity = sinfo_capacity()
    add_fairness(facts, table, capacity)
    return {
        "since": args.since if not args.input else None,
        "until": args.until,
        "by": args.by or "all",
        "capacity": capacity,
        "unreadable_sacct_lines": unreadable,
        "groups": summarise(facts, args.by),
        "jobs": [job_json(f) for f in facts],
    }


def _restart_seconds(args: argparse.Namespace) -> float | None:
    """--restart-seconds, else the config's preemption_overhead_seconds when above 0."""
    if args.restart_seconds is not None:
        s = float(args.restart_seconds)
        if not (0 <= s < 1e6):
            raise InputError(f"--restart-seconds {s:g}: give seconds, 0 or more (e.g. 120)")
        return s
    if args.config:
        from slurm_gavel.daemon.config import load_config

        cfg = load_config(args.config)
        if cfg.settings.preemption_overhead_seconds > 0:
            return cfg.settings.preemption_overhead_seconds
    return None


def _fmt(x: float | None, unit: str = "s") -> str:
    if x is None:
        return "-"
    if unit == "s":
        s = round(x)
        h, m = divmod(s // 60, 60)
        return f"{h}:{m:02d}:{s % 60:02d}"
    return f"{x:.3f}"


def format_table(report: dict[str, Any]) -> str:
    gpus = sorted({g for row in report["groups"] for g in row["gpu_hours"]})
    head = ["GROUP", "JOBS", "DONE", "JCT mean", "JCT p50", "QUEUE mean", "RESTARTS",
            "PER JOB", "LOST GPU-h", *[f"{g} GPU-h" for g in gpus], "RHO mean",
            "RHO max"]  # fmt: skip
    rows = [head]
    for r in report["groups"]:
        rows.append(
            [str(r["group"]), str(r["jobs"]), str(r["finished"]), _fmt(r["jct_s"]["mean"]),
             _fmt(r["jct_s"]["p50"]), _fmt(r["queue_delay_s"]["mean"]), str(r["restarts"]),
             f"{r['restarts_per_job']:.2f}", _fmt(r["restart_gpu_hours"], ""),
             *[_fmt(r["gpu_hours"].get(g, 0.0), "") for g in gpus],
             _fmt(r["rho"]["mean"], ""), _fmt(r["rho"]["max"], "")]
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths, strict=True))) for row in rows]  # fmt: skip
    if not report["capacity"]:
        lines.append("rho: no GPU capacity known (pass --capacity TYPE=N,... or --config)")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], out: Path) -> list[Path]:
    """jct, gpu_hours and rho_cdf as PNG, each with its data beside it as CSV."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    from slurm_gavel.simulate.plots import save

    groups = report["groups"]
    names = [printable(str(g["group"])) for g in groups]  # labels; the CSV keeps the raw name
    written = []
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.bar(names, [(g["jct_s"]["mean"] or 0) / 3600 for g in groups])
    ax.set_ylabel("mean JCT (hours)")
    ax.set_title(f"Job completion time by {report['by']}")
    fig.autofmt_xdate()
    rows = [[str(g["group"]), g["jobs"], g["finished"], g["jct_s"]["mean"]] for g in groups]
    written.append(
        save(fig, out / "jct.png", [report["by"], "jobs", "finished", "mean_jct_s"], rows)
    )
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    gpus = sorted({t for g in groups for t in g["gpu_hours"]})
    bottom = [0.0] * len(groups)
    for t in gpus:
        hours = [g["gpu_hours"].get(t, 0.0) for g in groups]
        ax.bar(names, hours, bottom=bottom, label=t)
        bottom = [b + h for b, h in zip(bottom, hours, strict=True)]
    ax.set_ylabel("GPU-hours")
    ax.set_title(f"GPU-hours per GPU type, by {report['by']}")
    if gpus:
        ax.legend()
    fig.autofmt_xdate()
    rows = [[str(g["group"]), *(g["gpu_hours"].get(t, 0.0) for t in gpus)] for g in groups]
    header = [report["by"], *(f"{t}_gpu_hours" for t in gpus)]
    written.append(save(fig, out / "gpu_hours.png", header, rows))
    jobs = sorted((j["rho"], str(j["job_id"])) for j in report["jobs"] if j["rho"] is not None)
    fractions = [(i + 1) / len(jobs) for i in range(len(jobs))]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot([r for r, _ in jobs], fractions, drawstyle="steps-post")
    ax.axvline(1.0, linestyle="--", color="grey")
    ax.set_xlabel("finish-time fairness rho (<= 1: fair)")
    ax.set_ylabel("fraction of jobs")
    rows = [[j, r, f] for (r, j), f in zip(jobs, fractions, strict=True)]
    written.append(save(fig, out / "rho_cdf.png", ["job", "rho", "fraction_of_jobs"], rows))
    return written


def run(args: argparse.Namespace) -> int:
    report = build(args)
    if args.plot:
        for path in plot(report, Path(args.plot)):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        write_json(args.json, report)
    if not to_stdout(args):
        sys.stdout.write(format_table(printable(report)))
    return 0
