"""`slurm-gavel status`: the managed jobs as the daemon last saw them, like squeue.

Reads the daemon's public view, status.json (status_view.py), which the daemon
rewrites world-readable at every save: any user can run it, while the daemon
runs or after it stopped, and no Slurm command is issued. Where no view exists
yet (a state directory from before the view) it falls back to state.json, which
only the daemon's user and root can read.

When the view is private (status_private.py: Slurm's PrivateData hides jobs), a
user reads their own view, status.d/<uid>.json (status_d.py), and sees their own
jobs only; root and the daemon's user read every job from state.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import sys
import time
from pathlib import Path
from typing import Any

from slurm_gavel import __version__
from slurm_gavel.commands.jsonout import add_json_option, to_stdout, write_json
from slurm_gavel.commands.mold_text import status_lines
from slurm_gavel.commands.status_fields import (
    BY_NAME,
    DEFAULT,
    Column,
    format_help,
    parse_format,
    table,
)
from slurm_gavel.commands.status_throughput import row_lines
from slurm_gavel.daemon.lease import ha_status
from slurm_gavel.daemon.state_store import StateStore
from slurm_gavel.daemon.status_d import read_view
from slurm_gavel.daemon.status_private import empty_user_view
from slurm_gavel.daemon.status_view import status_view, with_figures
from slurm_gavel.errors import InputError

DEFAULT_CONFIG = Path("/etc/slurm-gavel/gavel.yaml")
HIDDEN_BY_PRIVACY = (
    "the daemon's status view is private (status_privacy; Slurm's PrivateData=jobs "
    "prevents users from viewing jobs belonging to other users): you see your own jobs only"
)


def add_source_options(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--config", metavar="FILE", help=f"the daemon's config, to find its state_dir "
        f"(default {DEFAULT_CONFIG})"
    )  # fmt: skip
    where.add_argument(
        "--state-dir", metavar="DIR", help="the daemon's state directory (instead of --config)"
    )


SUMMARY = "show managed jobs like squeue: allocation, placement, time received, restarts"
# add_help=False: -h is --noheader, as in squeue; --help stays.
PARSER_OPTIONS = {"add_help": False}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Show every managed job as of the daemon's last round: its user, account,
    partition, job type and GPUs, its allocation per GPU type, where it runs, the
    time it has run ([D-]HH:MM:SS) and its restarts. Reads the daemon's public
    view (status.json in its state_dir); any user can run it. Where the view is
    private (status_privacy, as Slurm's PrivateData=jobs) a user sees only their
    own jobs; root and the daemon's user see every job."""
    p.add_argument("--help", action="help", help="show this help and exit")
    add_source_options(p)
    p.add_argument(
        "-u", "--user", metavar="USER[,...]", help="only these users' jobs (names or uids)"
    )
    p.add_argument("--me", action="store_true", help="only my own jobs (the user running this)")
    p.add_argument("-j", "--jobs", metavar="ID[,ID...]", help="only these job ids")
    p.add_argument("-p", "--partition", metavar="PART[,...]", help="only jobs in these partitions")
    p.add_argument(
        "-h", "--noheader", action="store_true",
        help="print the job rows only: no header row, no daemon line, no notes (as squeue -h)",
    )  # fmt: skip
    p.add_argument(
        "-o", "--format", metavar="FORMAT",
        help=(
            "columns to print, squeue-style '%.8i %u %j' (a dot right-justifies, a width "
            "cuts) or names 'jobid,user,jobtype:30'; fields: " + format_help()
        ).replace("%", "%%"),
    )  # fmt: skip
    add_json_option(p, "the view (squeue --json's shape: jobs, meta, errors, warnings)")


def state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir:
        return Path(args.state_dir)
    from slurm_gavel.daemon.config import (
        load_config,  # imports the policy registry: only when needed
    )

    path = Path(args.config) if args.config else DEFAULT_CONFIG
    if not args.config and not path.exists():
        raise InputError(
            f"no --config or --state-dir given and {DEFAULT_CONFIG} does not exist; "
            "pass the daemon's config file or its state directory"
        )
    return load_config(path).state_dir


def load_view(directory: Path) -> tuple[dict[str, Any], list[str]]:
    """The public view (or one built from state.json where none exists, or a private
    view for this user), and warnings."""
    store = StateStore(directory)
    warnings: list[str] = []
    view = store.load_view()
    if view is not None and view.get("private"):
        view = _private_view(store, view)
    elif view is None:
        doc = store.load()
        if doc is None:
            raise InputError(
                f"{store.view_path} does not exist: the daemon has not completed a round with "
                "this state_dir yet (start it with `slurm-gavel run --config FILE`)"
            )
        view = status_view(doc)
        warnings.append(
            f"{store.view_path} missing (a daemon from before the view): read {store.path}"
        )
    alive = store.daemon_alive()
    view["daemon"]["alive_pid"] = alive
    lead = ha_status(directory, time.time())
    if lead is not None:  # active/standby: the lease says who leads, not the lock
        view["ha"] = lead
    saved = view.get("saved_at")
    round_s = view["daemon"].get("round_seconds") or 0
    if saved and round_s and time.time() - saved > 3 * round_s + 60:
        who = "no daemon holds the state directory" if not alive else f"pid {alive} runs"
        warnings.append(f"the view is {round(time.time() - saved)} s old ({who})")
    # each job's priority and deficit: computed here, not written (status_view.py)
    return with_figures(view), warnings


def _private_view(store: StateStore, summary: dict[str, Any]) -> dict[str, Any]:
    """Every job, from state.json, for root and the daemon's user; anyone else's own
    view (status.d/<uid>.json), or none of their jobs when they have no view."""
    euid = os.geteuid()
    with contextlib.suppress(FileNotFoundError):
        if euid == 0 or store.path.stat().st_uid == euid:
            doc = store.load()
            if doc is not None:
                return status_view(doc)
    return read_view(store.dir, euid) or empty_user_view(summary, euid)


def select(view: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The jobs the filters (-u, --me, -j, -p) keep, in job id order."""
    users = _split(args.user)
    if args.me:
        uid = os.getuid()
        with contextlib.suppress(KeyError):  # a uid without a name: match the uid
            users |= {pwd.getpwuid(uid).pw_name}
        users |= {str(uid)}
    if users and view.get("user_id") is not None:
        _only_own(users, view["user_id"])
    ids, parts = _split(args.jobs), _split(args.partition)
    out = []
    for j in view["jobs"]:
        if users and not ({j.get("user"), str(j.get("user_id"))} & users):
            continue
        if ids and j["id"] not in ids:
            continue
        if parts and not (set((j.get("partition") or "").split(",")) & parts):
            continue
        out.append(j)
    return out


def _only_own(users: set[str], uid: int) -> None:
    """-u naming another user on a private view: say so, rather than list nothing."""
    own = {str(uid)}
    with contextlib.suppress(KeyError):
        own.add(pwd.getpwuid(uid).pw_name)
    others = sorted(users - own)
    if others:
        raise InputError(f"-u {','.join(others)}: {HIDDEN_BY_PRIVACY}")


def _split(text: str | None) -> set[str]:
    return {t.strip() for t in (text or "").split(",") if t.strip()}


def run(args: argparse.Namespace) -> int:
    columns = parse_format(args.format) if args.format else [Column(BY_NAME[n]) for n in DEFAULT]
    view, warnings = load_view(state_dir(args))
    jobs = select(view, args)
    if args.json:
        doc = {
            **{k: v for k, v in view.items() if k != "jobs"},
            "jobs": jobs,
            "meta": {
                "command": ["slurm-gavel", *getattr(args, "argv", ["status"])],
                "slurm_gavel": {"version": __version__, "view_format": view.get("format")},
            },
            "errors": [],
            "warnings": warnings,
        }
        write_json(args.json, doc)
        if to_stdout(args):
            return 0
    for w in warnings:
        print(f"slurm-gavel status: warning: {w}", file=sys.stderr)
    shown = {**view, "jobs": jobs}
    sys.stdout.write(format_status(printable(shown), columns, args.noheader, bool(args.format)))
    return 0


def format_status(
    view: dict[str, Any],
    columns: list[Column] | None = None,
    noheader: bool = False,
    rows_only: bool = False,
    now: float | None = None,
) -> str:
    """The terminal output: a daemon line, the table, the reasons and notes (the table
    alone with -o or -h)."""
    columns = columns or [Column(BY_NAME[n]) for n in DEFAULT]
    types = list(view["capacity"]) or sorted(
        {t for j in view["jobs"] for t in (*j["allocation"], *j["received_s"])}
    )
    rows = table(view["jobs"], columns, types, header=not noheader)
    if noheader or rows_only:
        return "".join(r + "\n" for r in rows)
    now = time.time() if now is None else now
    d = view["daemon"]
    alive = f"running (pid {d['alive_pid']})" if d.get("alive_pid") else "not running"
    saved = view.get("saved_at")
    ago = f", state saved {_ago(now - saved)} ago" if saved else ""
    lines = [f"daemon {alive}; round {view['round']}, policy {view.get('policy')}{ago}"]
    if view.get("ha") is not None:
        lines[0] = f"round {view['round']}, policy {view.get('policy')}{ago}"
        lines += ha_lines(view["ha"])
    if view.get("interrupted_round") is not None:
        # The daemon saves before it acts: with the daemon alive that is a round under
        # way, not one that was cut short.
        lines.append(
            f"round {view['interrupted_round']} is being carried out now"
            if d.get("alive_pid")
            else f"round {view['interrupted_round']} was interrupted while acting; the "
            "daemon reconciles it with Slurm on its next round"
        )
    if view["capacity"]:
        lines.append("usable GPUs: " + ", ".join(f"{t} {n}" for t, n in view["capacity"].items()))
    if not view["jobs"]:
        lines.append("no managed jobs" + (" of yours" if view.get("user_id") is not None else ""))
        return "\n".join(lines) + "\n"
    lines += rows
    waiting = [j for j in view["jobs"] if j.get("state") not in ("running", "starting")]
    if waiting:
        lines.append("why (slurm-gavel explain JOBID for the figures):")
        lines += [f"  {j['id']}: {j.get('why') or j.get('reason')}" for j in waiting[:50]]
    lines += _unmeasured_lines(view["jobs"])
    lines += _pair_estimate_lines(view["jobs"])
    lines += row_lines(view["jobs"])
    lines += status_lines(view["jobs"])
    return "\n".join(lines) + "\n"


def ha_lines(ha: dict[str, Any]) -> list[str]:
    """The lead and the standbys (active/standby), one line each."""
    if ha.get("error"):
        return [f"leader unknown: {ha['error']}"]
    lines = []
    lead = ha.get("leader")
    if lead is None:
        lines.append(f"leader: none recorded (generation {ha.get('generation')})")
    else:
        state = "released" if lead["released"] else "expired" if lead["expired"] else "held"
        lines.append(
            f"leader {lead['holder']} (generation {lead['generation']}): lease {state}, "
            f"renewed {_ago(max(0.0, lead['renewed_ago_s']))} ago (lease {lead['lease_s']:g}s)"
        )
    for sb in ha.get("standbys") or []:
        lines.append(f"standby {sb['holder']}: seen {_ago(max(0.0, sb['seen_ago_s']))} ago")
    if not ha.get("standbys"):
        lines.append("no standby: nothing takes over if the leader stops")
    return lines


def _ago(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


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


def _pair_estimate_lines(jobs: list[dict[str, Any]], limit: int = 50) -> list[str]:
    """One line per pair of job types sharing GPUs on a pair cell that is an estimate."""
    cells: dict[tuple[str, str, Any, Any], list[str]] = {}
    for j in jobs:
        cell = j.get("pair_cell") or {}
        if cell.get("estimate") and j["id"] < str(cell.get("partner")):
            types = sorted([j["job_type"] or "?", cell.get("partner_type") or "?"])
            key = (types[0], types[1], j["scale_factor"], j.get("gpu_type"))
            cells.setdefault(key, []).extend([j["id"], str(cell.get("partner"))])
    if not cells:
        return []
    lines = [
        "pair cells that are estimates (learned from paired jobs' progress reports, or "
        "derived from scale factor 1; `slurm-gavel profile --pairs` measures them):"
    ]
    for (a, b, sf, gpu), ids in sorted(cells.items(), key=lambda kv: str(kv[0]))[:limit]:
        lines.append(f"  {a} + {b} x{sf} on {gpu} (jobs {', '.join(ids[:10])})")
    return lines


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
