"""Each job's own throughput row in `status` and `explain`: per GPU type its
steps/s and what backs the figure, from the view's ``throughput`` (daemon/row_view.py).

A measured cell shows the seconds of the job's running time on that type behind it;
the others say where the figure comes from: its job type's row (prior), the estimate
from the jobs measured so far (estimate), or nothing (type-blind)."""

from __future__ import annotations

from typing import Any

from slurm_gavel.commands.status_fields import slurm_time

SHORT = {
    "measured": "measured",
    "prior": "prior",
    "estimate": "estimate",
    "estimated": "estimate",
    "given": "given",
}


def cell_text(cell: dict[str, Any]) -> str:
    """'12.5/s measured 3:00' or '4.1/s prior'."""
    rate = cell.get("steps_per_s")
    figure = "-" if not isinstance(rate, int | float) else f"{rate:.4g}/s"
    mark = str(cell.get("backed_by") or "?")
    backed = SHORT.get(mark, "type-blind" if "type-blind" in mark else mark)
    seconds = cell.get("seconds")
    if backed == "measured" and isinstance(seconds, int | float):
        return f"{figure} measured {slurm_time(seconds)}"
    return f"{figure} {backed}"


def reports_nothing(cells: dict[str, Any]) -> bool:
    return not any(c.get("backed_by") == "measured" for c in cells.values())


def row_lines(jobs: list[dict[str, Any]], limit: int = 50) -> list[str]:
    """One line per job with a row: its cells, and 'no reports yet: on its prior'."""
    shown = [j for j in jobs if j.get("throughput")]
    if not shown:
        return []
    lines = [
        "each job's throughput row (steps/s per GPU type; measured: from its progress "
        "reports, with the running time behind it; prior: its job type's row; estimate: "
        "from the jobs measured so far; type-blind: nothing known):"
    ]
    for j in shown[:limit]:
        cells = j["throughput"]
        row = ", ".join(f"{t} {cell_text(c)}" for t, c in sorted(cells.items()))
        note = "  (no reports yet: on its prior)" if reports_nothing(cells) else ""
        lines.append(f"  {j['id']} {j.get('job_type') or '(no type)'}: {row}{note}")
    if len(shown) > limit:
        lines.append(f"  ... {len(shown) - limit} more (--json for all)")
    return lines
