"""The table `simulate` prints: one row per policy (and knowledge), the average JCT of
each relative to the first row's."""

from __future__ import annotations

from typing import Any

HOUR = 3600.0


def format_comparison(summaries: list[dict[str, Any]]) -> str:
    """One row per policy; the last column is the average JCT relative to the first row.
    The first column is as wide as the longest row name (at least 28), so a long one
    such as "finish_time_fairness [type-blind]" does not push its row's figures out
    of their columns."""
    names = [_name(s) for s in summaries]
    w = max([28, *map(len, names)])
    head = (
        f"{'policy':<{w}}  {'jobs':>5}  {'avg JCT h':>9}  {'p50 h':>7}  {'p99 h':>7}  "
        f"{'makespan h':>10}  {'util':>5}  {'restarts':>8}  {'per job':>7}  {'lost GPU-h':>10}  "
        f"{'mean rho':>8}  {'wall s':>7}  {'JCT ratio':>9}"
    )
    lines = [head, "-" * len(head)]
    base = summaries[0]["avg_jct_s"] if summaries else None

    def h(x: float | None) -> str:
        return "-" if x is None else f"{x / HOUR:.2f}"

    for s, name in zip(summaries, names, strict=True):
        ratio = "-" if not base or s["avg_jct_s"] is None else f"{s['avg_jct_s'] / base:.3f}"
        rho = s["finish_time_fairness"]["mean_rho"]
        wall = "-" if s["wall_seconds"] is None else f"{s['wall_seconds']:.1f}"
        per_job = s.get("restarts_per_job")
        lost = s.get("restart_gpu_hours")
        lines.append(
            f"{name:<{w}}  {s['jobs']:>5}  {h(s['avg_jct_s']):>9}  {h(s['p50_jct_s']):>7}  "
            f"{h(s['p99_jct_s']):>7}  {h(s['makespan_s']):>10}  {s['utilization']:>5.2f}  "
            f"{s['preemptions']:>8}  {'-' if per_job is None else f'{per_job:.2f}':>7}  "
            f"{'-' if lost is None else f'{lost:.1f}':>10}  "
            f"{'-' if rho is None else f'{rho:.2f}':>8}  {wall:>7}  {ratio:>9}"
        )
    return "\n".join(lines) + "\n"


def _name(s: dict[str, Any]) -> str:
    """A row's name: the policy, what it knew, and how many jobs never finished."""
    return (
        s["policy"]
        + (f" [{s['knowledge']['mode']}]" if "knowledge" in s else "")
        + (f" ({s['unfinished_jobs']} unfinished)" if s["unfinished_jobs"] else "")
    )
