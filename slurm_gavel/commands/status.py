"""`slurm-gavel status`: the managed jobs as the daemon last saw them, like squeue.

Reads the daemon's state file only (no lock, no Slurm call), so it works while
the daemon runs, after it stopped, and on a machine that can read state_dir.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from slurm_gavel.errors import InputError
from slurm_gavel.state_store import StateStore

DEFAULT_CONFIG = Path("/etc/slurm-gavel/gavel.yaml")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "status",
        help="show managed jobs: type, allocation, placement, time received, restarts",
        description=(
            "Show every managed job as of the daemon's last round: its job type and GPUs, "
            "its allocation per GPU type, where it runs, the time it has received on each "
            "type and its restarts. Reads the daemon's state file; the daemon need not run."
        ),
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--config", metavar="FILE", help=f"the daemon config (default {DEFAULT_CONFIG})"
    )
    where.add_argument("--state-dir", metavar="DIR", help="the daemon's state directory")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=run)


def _state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir:
        return Path(args.state_dir)
    from slurm_gavel.config import load_config  # imports the policy registry: only when needed

    path = Path(args.config) if args.config else DEFAULT_CONFIG
    if not args.config and not path.exists():
        raise InputError(
            f"no --config or --state-dir given and {DEFAULT_CONFIG} does not exist; "
            "pass the daemon's config file or its state directory"
        )
    return load_config(path).state_dir


def status_view(doc: dict[str, Any], alive_pid: int | None) -> dict[str, Any]:
    """The state file reduced to what an admin asks: one record per managed job."""
    sched = doc.get("scheduler") or {}
    alloc = sched.get("allocation") or {}
    fractions: dict[str, dict[str, float]] = alloc.get("fractions") or {}
    paired: dict[str, dict[str, float]] = {}
    for pair in alloc.get("pairs") or []:
        for j in pair["jobs"]:
            row = paired.setdefault(j, {})
            for t, x in pair["fractions"].items():
                row[t] = row.get(t, 0.0) + x
    accounts = sched.get("jobs") or {}
    jobs = []
    for job_id, v in (doc.get("jobs") or {}).items():
        acct = accounts.get(job_id) or {}
        jobs.append(
            {
                "id": job_id,
                "job_type": v.get("job_type"),
                "scale_factor": v.get("scale_factor"),
                "state": v.get("state"),
                "reason": v.get("reason"),
                "allocation": fractions.get(job_id, {}),
                "paired_allocation": paired.get(job_id, {}),
                "gpu_type": v.get("gpu_type"),
                "nodes": v.get("nodes") or [],
                "received_s": acct.get("received_s", {}),
                "rounds": acct.get("rounds", 0),
                "restarts": max(int(v.get("restarts") or 0), int(acct.get("restarts") or 0)),
                "steps_done": v.get("steps_done"),
                "total_steps": v.get("total_steps"),
                # {GPU type: "estimate" | "unmeasured: type-blind"}: its figures there
                # are not measured (the throughput table lacks them; cluster_rows.py)
                "unmeasured": v.get("unmeasured") or {},
            }
        )
    jobs.sort(key=lambda j: (len(j["id"]), j["id"]))  # numeric ids in numeric order
    daemon = dict(doc.get("daemon") or {})
    daemon["alive_pid"] = alive_pid
    return {
        "daemon": daemon,
        "round": sched.get("round_index", 0),
        "saved_at": doc.get("saved_at"),
        "interrupted_round": (doc.get("inflight") or {}).get("round_index"),
        "policy": alloc.get("policy") or daemon.get("policy"),
        "capacity": (doc.get("cluster") or {}).get("capacity", {}),
        "jobs": jobs,
    }


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def format_status(view: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    d = view["daemon"]
    alive = f"running (pid {d['alive_pid']})" if d.get("alive_pid") else "not running"
    saved = view.get("saved_at")
    ago = f", state saved {_duration(now - saved)} ago" if saved else ""
    lines = [f"daemon {alive}; round {view['round']}, policy {view.get('policy')}{ago}"]
    if view.get("interrupted_round") is not None:
        lines.append(
            f"round {view['interrupted_round']} was interrupted while acting; the daemon "
            "reconciles it with Slurm on its next round"
        )
    types = list(view["capacity"]) or sorted(
        {t for j in view["jobs"] for t in (*j["allocation"], *j["received_s"])}
    )
    if view["capacity"]:
        lines.append("usable GPUs: " + ", ".join(f"{t} {n}" for t, n in view["capacity"].items()))
    if not view["jobs"]:
        lines.append("no managed jobs")
        return "\n".join(lines) + "\n"
    tw = "/".join(types)
    id_w = max(5, *(len(j["id"]) for j in view["jobs"]))
    type_w = min(28, max(4, *(len(j["job_type"] or "") for j in view["jobs"])))
    head = (
        f"{'JOBID':<{id_w}}  {'TYPE':<{type_w}}  GPUS  {'STATE':<9}  "
        f"{'ALLOC ' + tw:<{max(16, 6 + len(tw))}}  {'PLACEMENT':<20}  "
        f"{'RECEIVED ' + tw:<{max(20, 9 + len(tw))}}  RESTARTS"
    )
    lines.append(head)
    for j in view["jobs"]:
        alloc = "/".join(
            f"{j['allocation'].get(t, 0.0) + j['paired_allocation'].get(t, 0.0):.2f}" for t in types
        )
        place = (
            f"{j['gpu_type']}:" + ",".join(f"{n}" if g == 1 else f"{n}x{g}" for n, g in j["nodes"])
            if j["gpu_type"]
            else "-"
        )
        received = "/".join(_duration(j["received_s"].get(t, 0.0)) for t in types)
        lines.append(
            f"{j['id']:<{id_w}}  {(j['job_type'] or '?')[:type_w]:<{type_w}}  "
            f"{j['scale_factor'] or '?':>4}  {j['state'] or '?':<9}  "
            f"{alloc:<{max(16, 6 + len(tw))}}  {place:<20}  "
            f"{received:<{max(20, 9 + len(tw))}}  {j['restarts']:>8}"
        )
    reasons = [f"  {j['id']}: {j['reason']}" for j in view["jobs"] if j.get("reason")]
    if reasons:
        lines += ["why not placed:", *reasons[:50]]
    lines += _unmeasured_lines(view["jobs"])
    return "\n".join(lines) + "\n"


def _unmeasured_lines(jobs: list[dict[str, Any]], limit: int = 50) -> list[str]:
    """One line per kind of job (type, GPUs) whose figures on some GPU type are not
    measured: which types, how each is filled in, and the jobs concerned."""
    kinds: dict[tuple[str, Any, tuple[tuple[str, str], ...]], list[str]] = {}
    for j in jobs:
        if j.get("unmeasured"):
            cells = tuple(sorted(j["unmeasured"].items()))
            kinds.setdefault((j["job_type"] or "?", j["scale_factor"], cells), []).append(j["id"])
    if not kinds:
        return []
    lines = [
        "unmeasured throughputs (type-blind: the same figure on every such GPU type until "
        "a job reports from one; estimate: from job types measured there):"
    ]
    for (jt, sf, cells), ids in sorted(kinds.items(), key=lambda kv: str(kv[0]))[:limit]:
        where = ", ".join(f"{t} {mark}" for t, mark in cells)
        more = f" +{len(ids) - 10}" if len(ids) > 10 else ""
        lines.append(f"  {jt} x{sf}: {where} (jobs {', '.join(ids[:10])}{more})")
    return lines


def run(args: argparse.Namespace) -> int:
    store = StateStore(_state_dir(args))
    doc = store.load()
    if doc is None:
        raise InputError(
            f"{store.path} does not exist: the daemon has not completed a round with this "
            "state_dir yet (start it with `slurm-gavel run --config FILE`)"
        )
    view = status_view(doc, store.daemon_alive())
    if args.json:
        json.dump(view, sys.stdout, indent=2)  # ensure_ascii: control characters escaped
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_status(printable(view)))
    return 0


def printable(value: Any) -> Any:
    """`value` with every string (and mapping key) made safe for a terminal.

    Job types, ids, reasons and node names come from what users submit: an ESC
    sequence or a newline in one would repaint or forge lines of the admin's screen.
    Non-printable characters (C0/C1 controls, bidi overrides, line separators) are
    shown as Python escapes, and so is a backslash, so the text stays unambiguous."""
    if isinstance(value, str):
        if value.isprintable() and "\\" not in value:
            return value
        return "".join(c if c.isprintable() and c != "\\" else _escape(c) for c in value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(printable(v) for v in value)
    return value


def _escape(c: str) -> str:
    return "\\\\" if c == "\\" else repr(c)[1:-1]  # repr of a non-printable: its escape
