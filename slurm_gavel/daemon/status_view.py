"""The public status view: what `slurm-gavel status` and `explain` show, from the state.

The daemon's state.json is private (0600: it is the daemon's memory, and an
edited copy would be believed after a restart). Each round the daemon also
writes this view, world-readable, as status.json (StateStore.save_view), so any
user can run `status` and `explain`. It holds what squeue already shows to every
user (job id, user, account, partition, state, nodes, the job type of the
`gavel:` comment, restarts) and the scheduler's own figures for each job
(allocation, time received, the round's decision): no comment, job name, path or
progress report.

A job's priority and deficit per GPU type are not written: they move with the
allocation's age every round, so every record would change every round and none
could keep its text between saves (state_encode.py; at 20,000 jobs most of them
wait through a round unchanged). The view holds what they are computed from (the
allocation, ``epoch_received_s``, the view's ``allocation_age_s``), and the readers
compute them (job_figures, with the mechanism's own formula).

`why` is the one-line reason the daemon also writes to the job's AdminComment.
It is built here from the daemon's data only (states, GPU types, node names,
the policy name, numbers the daemon parsed), never from text a user wrote: the
scheduler's raw `reason` for a skipped job can quote the user's job type, so
`why` maps its code to a fixed sentence instead (core/skips.py, where the one reason
passed on as it is, Slurm's own for not starting a job, is explained).

Pure functions over the state document: no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from slurm_gavel.core import mechanism
from slurm_gavel.core.restart_aware.run_protection import RunProtection, from_state
from slurm_gavel.core.restart_costs import restart_costs
from slurm_gavel.core.skips import SkipCode, owner_sentence
from slurm_gavel.domain.cluster_model import SETTLING
from slurm_gavel.errors import InputError

# /2: the job records without "priority" and "deficit_s" (with_figures adds them back)
VIEW_FORMAT = "slurm-gavel-status/2"


def status_view(doc: dict[str, Any], alive_pid: int | None = None) -> dict[str, Any]:
    """The state document reduced to the public view: one record per managed job."""
    sched = doc.get("scheduler") or {}
    alloc = sched.get("allocation") or {}
    policy = alloc.get("policy") or (doc.get("daemon") or {}).get("policy")
    fractions: dict[str, dict[str, float]] = alloc.get("fractions") or {}
    paired: dict[str, dict[str, float]] = {}
    partner: dict[str, str] = {}
    for pair in alloc.get("pairs") or []:
        a, b = pair["jobs"]
        partner[a], partner[b] = b, a
        for j in pair["jobs"]:
            row = paired.setdefault(j, {})
            for t, x in pair["fractions"].items():
                row[t] = row.get(t, 0.0) + x
    accounts = sched.get("jobs") or {}
    elapsed = float(sched.get("epoch_elapsed") or 0.0)
    epoch_received: dict[str, dict[str, float]] = sched.get("epoch_received") or {}
    cluster = doc.get("cluster") or {}
    node_partition = {n["name"]: n.get("partition") for n in cluster.get("nodes") or []}
    round_index = int(sched.get("round_index") or 0)
    # the scheduler's clock at the last round: what protection times are measured on
    last_round = clock_value(sched.get("last_round_time"))
    slots = sched.get("plugins")
    slots = slots if isinstance(slots, Mapping) else {}
    protection = from_state(slots, accounts)
    # seconds a restart of each job costs, as the daemon measured them (restart_clock.py)
    measured = restart_costs.from_state(slots, accounts)
    held = held_types(doc.get("jobs") or {}, protection, last_round)
    jobs = []
    for job_id, v in (doc.get("jobs") or {}).items():
        acct = accounts.get(job_id) or {}
        # copies: a record keeps its text while equal to the last save's record
        # (state_encode.Fragments), so none may share a dict the rounds change in place
        row = dict(fractions.get(job_id) or {})
        got = dict(epoch_received.get(job_id) or {})
        received = acct.get("received_s") or {}
        nodes = v.get("nodes") or []
        part = v.get("partition") or next(
            (node_partition.get(n) for n, _ in nodes if node_partition.get(n)), None
        )
        job = {
            "id": job_id,
            "user": v.get("user"),
            "user_id": v.get("user_id"),
            "account": v.get("account"),
            "partition": part,
            "job_type": v.get("job_type"),
            "scale_factor": v.get("scale_factor"),
            "state": v.get("state"),
            "reason": v.get("reason"),
            "skip": v.get("skip"),
            "allocation": row,
            "paired_allocation": paired.get(job_id, {}),
            "partner": partner.get(job_id),
            "gpu_type": v.get("gpu_type"),
            "nodes": nodes,
            "received_s": received,
            "time_s": sum(received.values()),
            # Since the allocation was computed (the mechanism's figures), per GPU type;
            # with the allocation and the view's allocation_age_s, what the readers
            # compute its priority and deficit from (job_figures)
            "epoch_received_s": got,
            "rounds": acct.get("rounds", 0),
            "restarts": max(int(v.get("restarts") or 0), int(acct.get("restarts") or 0)),
            "restart_cost_s": measured.get(job_id),
            "steps_done": v.get("steps_done"),
            "total_steps": v.get("total_steps"),
            # {GPU type: "estimate" | "unmeasured: type-blind"}: its figures there
            # are not measured (the throughput table lacks them; cluster_rows.py)
            "unmeasured": v.get("unmeasured") or {},
            # sharing GPUs: {partner, partner_type, estimate: its pair cell is not
            # measured}; None when not sharing
            "pair_cell": v.get("pair_cell"),
            # the job's own row (daemon/row_view.py): {GPU type: {steps_per_s,
            # backed_by: measured|prior|estimate|unmeasured: type-blind, seconds}}
            "throughput": v.get("throughput"),
            # a moldable job's range, count and why (daemon/mold_view.py); None if rigid
            "moldable": moldable_record(v.get("moldable")),
            # restart-aware rounds (core/restart_aware/restart_aware.py): its run is kept
            # where it is until then (scheduler clock); None when not protected
            "protected_until": _until(protection.get(job_id)),
        }
        job["why"] = why(job, policy, last_round, held)
        jobs.append(job)
    jobs.sort(key=lambda j: (len(j["id"]), j["id"]))  # numeric ids in numeric order
    notices = notices_view(doc.get("notices"))
    for job in jobs:
        n = notices.pop(job["id"], None)
        if n is not None:  # a warning for a job still managed: after the round's reason
            job["why"] = f"{job['why']}; {n['why']}"
    daemon = {k: val for k, val in (doc.get("daemon") or {}).items() if k != "config"}
    daemon["alive_pid"] = alive_pid
    return {
        "format": VIEW_FORMAT,
        "daemon": daemon,
        "round": round_index,
        "saved_at": doc.get("saved_at"),
        "interrupted_round": (doc.get("inflight") or {}).get("round_index"),
        "policy": policy,
        "allocation_age_s": elapsed,
        "last_round_time": last_round,
        "capacity": cluster.get("capacity", {}),
        "gpus_installed": gpus_installed(cluster.get("nodes") or []),
        "jobs": jobs,
        # jobs no longer managed (given back, ended) and what the daemon told their
        # owners about how their runs ended (daemon/run_watch.py); `explain` reads them
        "notices": sorted(notices.values(), key=lambda n: (len(n["id"]), n["id"])),
    }


NOTICE_KINDS = ("given back", "ended", "warned")


def notices_view(raw: Any) -> dict[str, dict[str, Any]]:
    """The state's notices (run_watch.py) as view records, job id -> {id, user,
    user_id, kind, why}; anything not in the daemon's shape is dropped."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(raw, dict):
        return out
    for job_id, v in raw.items():
        if not isinstance(v, dict) or not isinstance(v.get("text"), str):
            continue
        kind = v.get("kind")
        out[str(job_id)] = {
            "id": str(job_id),
            "user": v.get("user") if isinstance(v.get("user"), str) else None,
            "user_id": v.get("user_id"),
            "kind": kind if kind in NOTICE_KINDS else None,
            "why": v["text"],
        }
    return out


def gpus_installed(nodes: list[Any]) -> dict[str, int]:
    """GPUs per type on the nodes the last round saw, each node once, whatever its state
    or its other jobs: the cluster's size, where "capacity" is what that round could use
    (a down node, or GPUs an unmanaged job held at that moment, are not in it). `report`
    normalises finish-time fairness by this one; a moment's usable GPUs made it depend
    on when the last round ran."""
    seen: dict[str, tuple[str, int]] = {}
    for n in nodes:
        if not isinstance(n, dict):
            continue
        name, gpu, count = n.get("name"), n.get("gpu_type"), n.get("gpus")
        if isinstance(name, str) and isinstance(gpu, str) and _count(count):
            seen[name] = (gpu, count)
    out: dict[str, int] = {}
    for gpu, count in seen.values():
        out[gpu] = out.get(gpu, 0) + count
    return out


CHOSEN = ("running", "moved", "regrow", "least", "grown", "untried", "joint", "no-rows",
          "not-chosen")  # fmt: skip
LIMITS = ("capacity", "rows", "share", "running", "no-progress", "untried-running")
BACKED = ("prior", "measured", "partly measured", "measured, no prior")


def moldable_record(raw: Any) -> dict[str, Any] | None:
    """The moldable record as the view shows it: whole numbers and the fixed codes of
    mold_view.py only (anything else dropped), so no text can reach a terminal."""
    if not isinstance(raw, dict):
        return None
    r = raw.get("range")
    if not (isinstance(r, list) and len(r) == 2 and all(_count(x) for x in r) and r[0] <= r[1]):
        return None
    counts = []
    for c in raw.get("counts") or []:
        if not isinstance(c, dict):
            continue
        rate = clock_value(c.get("steps_per_s"))
        if _count(c.get("gpus")) and rate is not None:
            backed = c.get("backed_by")
            counts.append({"gpus": c["gpus"], "steps_per_s": rate,
                           "backed_by": backed if backed in BACKED else None})  # fmt: skip
    return {
        "range": list(r),
        "count": raw.get("count") if _count(raw.get("count")) else None,
        "run": "this" if raw.get("run") == "this" else "next",
        "last_count": raw.get("last_count") if _count(raw.get("last_count")) else None,
        "chosen": raw.get("chosen") if raw.get("chosen") in CHOSEN else None,
        "limit": raw.get("limit") if raw.get("limit") in LIMITS else None,
        "largest_type_gpus": raw.get("largest_type_gpus")
        if _count(raw.get("largest_type_gpus"))
        else None,
        "counts": counts,
    }


def clock_value(x: Any) -> float | None:
    """A finite, non-negative number as the view keeps it (a time on the scheduler's
    clock, a rate), else None: the state is the daemon's own, but a view read back may
    not be."""
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
    return float(x) if ok else None


def is_protected(until: float | None, now: float | None) -> bool:
    """Whether a run protected until ``until`` is still kept at ``now`` (the last round)."""
    return until is not None and now is not None and until > now


def _until(guard: RunProtection | None) -> float | None:
    return None if guard is None else clock_value(guard.protected_until)


def held_types(
    jobs: dict[str, Any], protection: Mapping[str, RunProtection], now: float | None
) -> set[str]:
    """The GPU types on which some run is kept by restart-aware protection."""
    out: set[str] = set()
    for job_id, v in jobs.items():
        until = _until(protection.get(job_id))
        t = v.get("gpu_type")
        running = v.get("state") in ("starting", "running")
        if isinstance(t, str) and running and is_protected(until, now):
            out.add(t)
    return out


def _count(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1_000_000


def job_figures(
    job: Mapping[str, Any], age: Any
) -> tuple[dict[str, float | None], dict[str, float]]:
    """A job's priority and deficit per GPU type of its allocation, as the mechanism
    ranked it (mechanism.priority, mechanism.deficit), from its view record and the
    view's ``allocation_age_s``. A priority of None stands for infinity (allocated
    there, not run there since the allocation): JSON has no infinity.

    A view read back may be anyone's file (status.d): a type whose fraction or time
    received is not a finite number gets no figure, nor does a figure that would not
    be finite; a bad age counts as 0 (no time since the allocation)."""
    elapsed = clock_value(age) or 0.0
    row = job.get("allocation")
    got = job.get("epoch_received_s")
    got = got if isinstance(got, Mapping) else {}
    prio: dict[str, float | None] = {}
    deficits: dict[str, float] = {}
    for t, x in row.items() if isinstance(row, Mapping) else ():
        r = got.get(t, 0.0)
        if not (_finite(x) and _finite(r)):
            continue
        d = mechanism.deficit(float(x), float(r), elapsed)
        if not math.isfinite(d):
            continue
        try:
            p = mechanism.priority(float(x), float(r), elapsed)
        except ZeroDivisionError:  # a share of time so small it is 0.0: infinite
            p = math.inf
        prio[str(t)] = None if math.isinf(p) or math.isnan(p) else p
        deficits[str(t)] = d
    return prio, deficits


def with_figures(view: dict[str, Any]) -> dict[str, Any]:
    """The view with each job's "priority" and "deficit_s" (job_figures) in its
    record, as views before slurm-gavel-status/2 wrote them: what `status --json`
    and `explain` show. A view written with them (an older daemon's) gets them
    computed again, from the same figures with the same formula."""
    age = view.get("allocation_age_s")
    jobs = view.get("jobs")
    for job in jobs if isinstance(jobs, list) else ():
        if isinstance(job, dict):
            job["priority"], job["deficit_s"] = job_figures(job, age)
    return view


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def why(
    job: dict[str, Any],
    policy: str | None,
    now: float | None = None,
    held: set[str] | frozenset[str] = frozenset(),
) -> str:
    """The round's decision for one job, in one line, from the daemon's data only.
    ``now``: the scheduler's clock at the last round; ``held``: the GPU types on which
    restart-aware protection keeps some run (held_types).

    Stable while the decision stays the same (no figures that move every round), so
    the daemon rewrites the job's AdminComment only when the decision changes. And
    shared by every job with the same decision (no job id, no node: squeue has
    those), so one scontrol command writes them all: the commands per round are
    bounded by the kinds of decision (about a dozen per GPU type), not the jobs."""
    state = job.get("state")
    gpu_type = job.get("gpu_type")
    where = str(gpu_type)
    alloc = {t: x for t, x in job["allocation"].items() if x > 0.0}
    alloc.update({t: x for t, x in job["paired_allocation"].items() if x > 0.0})
    reason = job.get("reason") or ""
    if state == "kept":
        return (
            f"kept on {where}: its node does not respond; not preempted (the checkpoint "
            "signal cannot reach it)"
        )
    if state in ("starting", "running"):
        shared = ", sharing its GPUs with another job" if job.get("partner") else ""
        if is_protected(job.get("protected_until"), now):
            return (
                f"running on {where}{shared}: kept where it runs until this run has paid for "
                "its restart (restart-aware rounds; slurm-gavel explain says until when)"
            )
        if gpu_type in alloc:
            return (
                f"running on {where}{shared}: among the highest priorities for {gpu_type} "
                f"this round (policy {policy})"
            )
        return (
            f"running on {where}{shared}: a {gpu_type} GPU nobody with an allocation there "
            "wanted (work conservation)"
        )
    if state == "preempted":
        return (
            "preempted: jobs with a higher priority took its GPUs this round; it "
            "checkpoints, waits held and resumes when a round places it again"
        )
    if state == "skipped":
        code = str(job.get("skip") or SkipCode.OTHER)
        return owner_sentence(code, reason, int(job.get("scale_factor") or 0))
    if reason == SETTLING:
        return "waiting: the daemon is settling after a Slurm outage and acts shortly"
    if reason:
        return "waiting: the last attempt to place it failed; it retries next round"
    if not alloc:
        return (
            f"waiting: the policy ({policy}) gives it no GPU time in the current "
            "allocation; it runs when jobs finish or arrive and the allocation changes"
        )
    if held & alloc.keys():
        return (
            "waiting: jobs with a higher priority, or runs kept until they have paid for "
            "their restarts (restart-aware rounds), hold every GPU of the types it is "
            "allocated; its priority grows each round it waits"
        )
    return (
        "waiting: jobs with a higher priority took every GPU of the types it is "
        "allocated this round; its priority grows each round it waits"
    )


def parse_view(text: str, path: Path, error: type[InputError]) -> dict[str, Any]:
    """A status view read back (status.json, or a user's own under status.d), or
    `error` naming the file: not JSON, or not the shape the daemon writes."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise error(f"{path}: not a slurm-gavel status view")
    return doc
