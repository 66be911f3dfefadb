"""A moldable job in `status` and `explain`: its GPU range, the count of its
run or of its next start, why the round chose that count and not more, and its rows
per count (prior or measured). From the view's ``moldable`` record
(daemon/mold_view.py, checked by status_view.moldable_record: whole numbers and fixed
codes only); every sentence here is fixed text around those numbers."""

from __future__ import annotations

from typing import Any

CHOSEN = {
    "running": "the count of this run; a count changes only at a (re)start",
    "moved": "the count of its last run: a running job the round moves keeps its count",
    "regrow": (
        "restarted at a larger count: the time it saves on the job's remaining steps is "
        "at least 2x its restart cost"
    ),
    "least": (
        "the least count of its range with a throughput row (under contention the GPUs are "
        "shared among more jobs)"
    ),
    "grown": "grown from {least} into GPUs no other job was given (the largest gain per GPU)",
    "untried": (
        "grown past {top} (the largest count with a throughput row or a report of its own; "
        "its least where it has none) into GPUs that no other job was given and no known "
        "gain took: tried, so that its progress reports measure it there"
    ),
    "joint": "chosen by the joint LP over GPU type and count (moldable_lp)",
    "no-rows": (
        "its request: the throughput table has no row for its job type at any count of its "
        "range, and it has not reported at one"
    ),
    "not-chosen": "no count chosen: the round did not consider it",
}
LIMIT = {
    "capacity": "not more: no GPU type has more than {largest}",
    "rows": (
        "not more: the throughput table has no row for its job type above {count}, "
        "nor did it report at one"
    ),
    "share": (
        "not more: a larger count would take GPUs the round gave other jobs, or gains "
        "nothing on its rows"
    ),
    "share-joint": "not more: a larger count did not raise the LP's max-min share",
    "running": "it grows only by a restart that saves at least 2x its restart cost",
    "no-progress": (
        "not more while it runs: it grows only by a restart that saves at least 2x its "
        "restart cost, and it reports no steps done to weigh one by (slurm_gavel.job's "
        "progress reports)"
    ),
    "untried-running": (
        "not more while it runs: no throughput row or report says more than {count} is "
        "faster, so no restart is spent on a larger count; one is tried at its next start "
        "if GPUs are idle then"
    ),
}


def gpus_cell(job: dict[str, Any]) -> str:
    """The GPUS column: '4 (1-8)' for a moldable job at 4, '1-8' before a count; else
    the GPUs it asked for."""
    m = job.get("moldable")
    if not m:
        return str(job.get("scale_factor") or "?")
    span = f"{m['range'][0]}-{m['range'][1]}"
    return f"{m['count']} ({span})" if m.get("count") else span


def count_sentence(m: dict[str, Any]) -> str:
    """'range 1-8 GPUs; this run has 4: <why>; <why not more>'."""
    lo, hi = m["range"]
    count = m.get("count")
    last = m.get("last_count")
    was = f" (its last run had {last})" if last else ""
    if count is None:
        head = f"range {lo}-{hi} GPUs"
    elif m.get("run") == "this":
        head = f"range {lo}-{hi} GPUs; this run has {count}{was}"
    else:
        head = f"range {lo}-{hi} GPUs; its next start at {count}{was}"
    known = [c["gpus"] for c in m.get("counts") or []]
    chosen = m.get("chosen")
    parts = (
        [
            head
            + ": "
            + CHOSEN[chosen].format(least=min(known, default=lo), top=max(known, default=lo))
        ]
        if chosen in CHOSEN
        else [head]
    )
    limit = m.get("limit")
    if limit == "share" and chosen == "joint":
        limit = "share-joint"
    if limit in LIMIT:
        largest = _gpus(m.get("largest_type_gpus"))
        parts.append(LIMIT[limit].format(largest=largest, count=_gpus(count)))
    return "; ".join(parts)


def rows_text(m: dict[str, Any]) -> str:
    """'1: 10.2/s prior, 2: 19.1/s measured' (steps/s averaged over the cluster's GPUs)."""
    return ", ".join(
        f"{c['gpus']}: {c['steps_per_s']:.4g}/s {c.get('backed_by') or '?'}"
        for c in m.get("counts") or []
    )


def explain_lines(job: dict[str, Any]) -> list[str]:
    m = job.get("moldable")
    if not m:
        return []
    lines = [f"moldable, {count_sentence(m)}"]
    if m.get("counts"):
        lines.append(
            "  its rows per count (steps/s averaged over the cluster's GPUs, what the "
            f"choice compares): {rows_text(m)}"
        )
    return lines


def status_lines(jobs: list[dict[str, Any]], limit: int = 50) -> list[str]:
    shown = [j for j in jobs if j.get("moldable")]
    if not shown:
        return []
    lines = ["moldable jobs (GPU range, the count of the run or of the next start, and why):"]
    for j in shown[:limit]:
        m = j["moldable"]
        at = next((c for c in m.get("counts") or [] if c["gpus"] == m.get("count")), None)
        backed = f" (its row at {m['count']}: {at.get('backed_by') or '?'})" if at else ""
        lines.append(f"  {j['id']}: {count_sentence(m)}{backed}")
    if len(shown) > limit:
        lines.append(f"  ... {len(shown) - limit} more (--json for all)")
    return lines


def _gpus(n: int | None) -> str:
    return "? GPUs" if n is None else f"{n} GPU" + ("" if n == 1 else "s")
