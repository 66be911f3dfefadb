"""The table `simulate` prints (commands/simulate_table.py)."""

from __future__ import annotations

from typing import Any

from slurm_gavel.commands.simulate_table import format_comparison


def _summary(policy: str, avg: float, **more: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "policy": policy,
        "jobs": 3,
        "avg_jct_s": avg,
        "p50_jct_s": avg,
        "p99_jct_s": avg,
        "makespan_s": 2 * avg,
        "utilization": 0.5,
        "preemptions": 4,
        "finish_time_fairness": {"mean_rho": 1.0},
        "wall_seconds": None,
        "unfinished_jobs": 0,
    }
    s.update(more)
    return s


def test_long_row_names_widen_the_first_column_and_keep_figures_aligned():
    rows = [
        _summary("max_min_fairness", 3600.0, knowledge={"mode": "learned"}),
        _summary("finish_time_fairness", 7200.0, knowledge={"mode": "type-blind"}),
        _summary("fifo", 1800.0, unfinished_jobs=12),
    ]
    lines = format_comparison(rows).splitlines()
    head, body = lines[0], lines[2:]
    assert body[1].startswith("finish_time_fairness [type-blind]  ")
    # every row ends its "jobs" figure where the header's "jobs" ends, and has the
    # header's length: nothing pushed out of its column
    end = head.index("jobs") + len("jobs")
    assert all(line[:end].endswith("3") and len(line) == len(head) for line in body)
    assert [line.split()[-1] for line in body] == ["1.000", "2.000", "0.500"]


def test_short_names_keep_the_28_wide_column():
    lines = format_comparison([_summary("fifo", 60.0)]).splitlines()
    assert lines[0].index("jobs") == 28 + 2 + 1  # "policy" padded to 28, two spaces, " jobs"
