"""`slurm-gavel status` while the daemon carries a round out: the daemon saves its
state before it acts, so root's view (read from state.json) has an inflight
round. With the daemon alive that round is under way, not interrupted, and the
view keeps the last round's notes on unmeasured throughputs."""

from __future__ import annotations

import json

from slurm_gavel.commands.status import format_status
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.daemon.status_records import jobs_view
from slurm_gavel.daemon.status_view import status_view
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobState,
    NodeSlice,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job

BLIND = "unmeasured: type-blind"


def _snap() -> ClusterSnapshot:
    return ClusterSnapshot(
        0.0,
        (),
        (
            ObservedJob(Job("7", "A3C"), JobState.RUNNING, "a100", (NodeSlice("a100-1", 1),)),
            ObservedJob(Job("8", "A3C"), JobState.PENDING, None, ()),
        ),
    )


def _last_round() -> RoundReport:
    return RoundReport(
        round_index=4,
        time=0.0,
        reallocated=False,
        solve_seconds=0.0,
        placement=RoundPlacement(4, 0.0, {}),
        result=ActResult(),
        active_jobs=2,
        unmeasured=(("A3C", 1, "a100", BLIND), ("A3C", 1, "h100", BLIND)),
    )


def _text(rows: dict, alive_pid: int | None) -> str:
    doc = {
        "jobs": rows,
        "daemon": {"policy": "max_min_fairness"},
        "inflight": {"round_index": 5},
    }
    view = status_view(json.loads(json.dumps(doc)), alive_pid=alive_pid)
    return format_status(view, now=0.0)


def test_a_mid_round_view_keeps_the_last_rounds_unmeasured_marks():
    rows = jobs_view(_snap(), None, previous=_last_round())
    assert rows["7"]["unmeasured"] == {"a100": BLIND, "h100": BLIND}
    assert rows["8"]["unmeasured"] == {"a100": BLIND, "h100": BLIND}
    assert "unmeasured throughputs (type-blind" in _text(rows, alive_pid=123)
    # without a previous round (the daemon's first), there is nothing to keep
    assert jobs_view(_snap(), None)["7"]["unmeasured"] == {}


def test_an_inflight_round_is_under_way_while_the_daemon_lives_and_interrupted_after():
    rows = jobs_view(_snap(), None, previous=_last_round())
    alive = _text(rows, alive_pid=123)
    assert "round 5 is being carried out now" in alive and "interrupted" not in alive
    dead = _text(rows, alive_pid=None)
    assert "round 5 was interrupted while acting" in dead
