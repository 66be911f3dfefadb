"""daemon/mold_view.py on built rounds: the record's count and code where the daemon
runs are hard to arrange (a running job restarted at a larger count, a job the round
did not consider), and LastCounts, the memory of each job's last run."""

from __future__ import annotations

from slurm_gavel.core.cluster_rows import rows_for
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_settings import DAEMON_DEFAULTS
from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.daemon.mold_view import LastCounts, mold_view
from slurm_gavel.domain.cluster_model import (
    ClusterSnapshot,
    JobState,
    Node,
    NodeSlice,
    ObservedJob,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable

A3C = "A3C"
TABLE = ThroughputTable(
    alone={(A3C, 1): {"v100": 10.0}, (A3C, 2): {"v100": 19.0}, (A3C, 4): {"v100": 30.0}}
)
NODES = (Node("v100-0", "v100", 4), Node("v100-1", "v100", 4))


def _job(
    state: JobState, gpus: int = 0, waiting_on: str | None = None, steps_done: float | None = None
) -> ObservedJob:
    job = Job("5", A3C, 1, total_steps=1e6, scale_range=(1, 8))
    nodes = (NodeSlice("v100-0", gpus),) if gpus else ()
    gpu_type = "v100" if gpus else None
    return ObservedJob(job, state, gpu_type, nodes, waiting_on=waiting_on, steps_done=steps_done)


def _view(o: ObservedJob, last: LastCounts | None = None, knowledge=Knowledge.TABLE):
    state = SchedulerState()
    state.caches.cluster_rows = rows_for(None, TABLE, {"v100": 8})
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness", settings=DAEMON_DEFAULTS,
                             knowledge=knowledge)  # fmt: skip
    view = mold_view(state, config, ClusterSnapshot(0.0, NODES, (o,)), last)
    assert view is not None
    return view


def test_a_running_job_restarted_at_a_larger_count_is_a_regrow():
    o = _job(JobState.RUNNING, 2)
    m = _view(o)(o, "starting", (NodeSlice("v100-1", 4),))
    assert (m["count"], m["last_count"], m["chosen"]) == (4, 2, "regrow")
    # 8 is in its range but the table has no row above 4
    assert m["limit"] == "rows" and [c["gpus"] for c in m["counts"]] == [1, 2, 4]
    assert all(c["backed_by"] == "prior" for c in m["counts"])
    assert m["counts"][0]["steps_per_s"] == 10.0


def test_moved_at_the_same_count_is_not_a_regrow():
    o = _job(JobState.RUNNING, 2, steps_done=10.0)
    m = _view(o)(o, "starting", (NodeSlice("v100-1", 2),))
    assert (m["count"], m["chosen"], m["limit"]) == (2, "moved", "running")


def test_a_running_job_says_what_keeps_it_below_its_maximum():
    """Why a run stays below its range's maximum, by what the round knows of it: rows
    above its count but no steps done to weigh a restart by; no row above its count
    (under the table's rows, or learned rows, where a larger count is only tried at a
    start)."""
    o = _job(JobState.RUNNING, 2)
    assert _view(o)(o, "running", o.nodes)["limit"] == "no-progress"
    o = _job(JobState.RUNNING, 2, steps_done=10.0)
    assert _view(o)(o, "running", o.nodes)["limit"] == "running"
    o = _job(JobState.RUNNING, 4, steps_done=10.0)  # the table has no row above 4
    assert _view(o)(o, "running", o.nodes)["limit"] == "rows"
    m = _view(o, knowledge=Knowledge.LEARNED)(o, "running", o.nodes)
    assert (m["chosen"], m["limit"]) == ("running", "untried-running")


def test_a_count_past_its_rows_is_untried_under_learned_rows():
    o = _job(JobState.HELD)
    state = SchedulerState()
    state.caches.cluster_rows = rows_for(None, TABLE, {"v100": 8})
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness", settings=DAEMON_DEFAULTS,
                             knowledge=Knowledge.LEARNED)  # fmt: skip
    state.plugins.moldable_counts.jobs["5"] = (o.job, 6, o.job)  # the round chose 6 (rows up to 4)
    view = mold_view(state, config, ClusterSnapshot(0.0, NODES, (o,)))
    assert view is not None
    m = view(o, "held", ())
    assert (m["count"], m["chosen"], m["limit"]) == (6, "untried", "share")


def test_a_job_waiting_on_slurm_has_no_count_chosen():
    o = _job(JobState.PENDING, waiting_on="Dependency")
    m = _view(o)(o, "skipped", ())
    assert (m["count"], m["chosen"], m["limit"]) == (None, "not-chosen", None)


def test_its_measured_cells_back_the_count():
    o = _job(JobState.HELD)
    state = SchedulerState()
    state.caches.cluster_rows = rows_for(None, TABLE, {"v100": 8})
    state.plugins.moldable_counts.measured["5"] = {2: {"v100": 17.0}, 3: {"v100": 25.0}}
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness", settings=DAEMON_DEFAULTS)
    view = mold_view(state, config, ClusterSnapshot(0.0, NODES, (o,)))
    assert view is not None
    m = view(o, "held", ())
    by = {c["gpus"]: (c["steps_per_s"], c["backed_by"]) for c in m["counts"]}
    assert by == {1: (10.0, "prior"), 2: (17.0, "measured"), 3: (25.0, "measured, no prior"),
                  4: (30.0, "prior")}  # fmt: skip


def test_no_view_without_a_moldable_job():
    rigid = ObservedJob(Job("1", A3C, 1), JobState.PENDING)
    state = SchedulerState()
    config = SchedulerConfig(table=TABLE, policy="max_min_fairness", settings=DAEMON_DEFAULTS)
    assert mold_view(state, config, ClusterSnapshot(0.0, NODES, (rigid,))) is None
    assert mold_view(state, config, None) is None


def test_last_counts_remember_the_last_run_and_forget_jobs_that_left():
    last = LastCounts()
    last.update(ClusterSnapshot(0.0, NODES, (_job(JobState.RUNNING, 4),)))
    held = _job(JobState.HELD)
    last.update(ClusterSnapshot(60.0, NODES, (held,)))
    assert last.counts == {"5": 4}
    m = _view(held, last)(held, "held", ())
    assert (m["count"], m["run"], m["last_count"]) == (1, "next", 4)
    last.update(ClusterSnapshot(120.0, NODES, ()))
    assert last.counts == {}
