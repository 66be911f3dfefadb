"""The daemon's watch on how runs end (daemon/run_watch.py) over an in-memory backend
that reports run ends as the Slurm backend would (backends/slurm/ended_runs.py): a crash
loop is given back after N short unsignalled runs in a row, a job that ignores the
signal is warned then given back, a job the signal killed is told why; each logged
once and counted. Real Slurm: test_run_watch_on_slurm.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from daemon_records import daemon_records

from slurm_gavel.commands.explain import explain_notice
from slurm_gavel.core.run_ends import RunEnd, RunEndKind
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.config_types import CheckpointConfig, ConfigError
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.run_watch import RunWatch, notices_from_json
from slurm_gavel.daemon.status_private import public_summary, user_views
from slurm_gavel.domain.cluster_model import (
    ActResult,
    ClusterSnapshot,
    JobState,
    Node,
    ObservedJob,
    RoundPlacement,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

UNSIGNALLED = RunEndKind.UNSIGNALLED


class InMemory:
    """Managed jobs held between runs, one v100 node; `ends` is what the next observe
    reports as ended (as SlurmBackend.run_ends); give_back and AdminComment recorded.
    A job given back is no longer managed: it leaves the snapshot."""

    def __init__(self, jobs: dict[str, JobState]) -> None:
        self.jobs = dict(jobs)
        self.ended_next: list[list[RunEnd]] = []
        self.run_ends: list[RunEnd] = []
        self.given: list[dict[str, str]] = []
        self.comments: dict[str, str] = {}
        self.comment_calls: list[list[str]] = []
        self.finished: set[str] = set()  # Slurm refuses their AdminComment
        self.started: list[tuple[str, ...]] = []
        self.clock = 1000.0

    def observe(self) -> ClusterSnapshot:
        self.clock += 60
        self.run_ends = self.ended_next.pop(0) if self.ended_next else []
        jobs = tuple(
            ObservedJob(Job(j, "A3C", 1, total_steps=1e9, user="alice"), state,
                        gpu_type="v100" if state is JobState.RUNNING else None, user_id=1000)
            for j, state in self.jobs.items()
        )  # fmt: skip
        return ClusterSnapshot(self.clock, (Node("v100-1", "v100", 4, "gpu"),), jobs)

    def act(self, placement: RoundPlacement) -> ActResult:
        self.started.append(tuple(sorted(placement.jobs)))
        return ActResult(started=tuple(placement.jobs))

    @property
    def refused_held(self) -> dict[str, str]:
        return {}

    def give_back(self, reasons: Mapping[str, str]) -> dict[str, str]:
        self.given.append(dict(reasons))
        for j in reasons:
            self.jobs.pop(j, None)
        return {}

    def set_admin_comments(self, texts: Mapping[str, str]) -> dict[str, str]:
        self.comment_calls.append(sorted(texts))
        self.comments.update({j: t for j, t in texts.items() if j not in self.finished})
        return {j: "Job has already finished" for j in texts if j in self.finished}


def daemon(tmp_path: Path, backend: InMemory, **checkpoint: Any) -> Daemon:
    cfg = parse_config({
        "partitions": ["gpu"], "round_seconds": 60, "state_dir": str(tmp_path / "s"),
        "status_privacy": "public",
        "checkpoint": {"grace_seconds": 5, **checkpoint},
    })  # fmt: skip
    d = Daemon(cfg, backend, table=load_table(), metrics=DaemonMetrics())
    d.start()
    return d


def rounds(d: Daemon, n: int) -> list[logging.LogRecord]:
    with daemon_records(logging.INFO) as records:
        for _ in range(n):
            d.round()
    return records


def events(records: list[logging.LogRecord], name: str) -> list[dict[str, Any]]:
    return [r.fields for r in records if getattr(r, "event", None) == name]  # type: ignore[attr-defined]


def metric(d: Daemon, name: str, **labels: str) -> float:
    return d.metrics.registry.get_sample_value(name, labels) or 0.0


def view(d: Daemon) -> dict[str, Any]:
    return json.loads((d.store.dir / "status.json").read_text())


def crash(job: str = "7", ran_s: float | None = None) -> RunEnd:
    return RunEnd(job, UNSIGNALLED, "SPECIAL_EXIT, exit code 99", ran_s=ran_s)


def test_a_crash_loop_is_given_back_after_n_short_runs_logged_once_and_counted(tmp_path):
    b = InMemory({"7": JobState.HELD, "8": JobState.HELD})
    b.ended_next = [[], [crash()], [crash()], [crash()], []]
    d = daemon(tmp_path, b, max_unsignalled_restarts=3)
    try:
        records = rounds(d, 5)
    finally:
        d.store.release()
    # placed at each round until the third short run; not placed again after it
    assert [("7" in s) for s in b.started] == [True, True, True, False, False]
    assert len(b.given) == 1 and list(b.given[0]) == ["7"]
    why = b.given[0]["7"]
    assert why.startswith("crash loop: its last 3 runs ended without the checkpoint signal")
    assert "exit code 99" in why and "within 600 s" in why
    assert [e["job"] for e in events(records, "crash_loop")] == ["7"]  # once
    assert [e["job"] for e in events(records, "job_given_back")] == ["7"]
    assert metric(d, "slurm_gavel_run_ends_total", kind="unsignalled") == 3
    assert metric(d, "slurm_gavel_jobs_given_back_total", why="crash_loop") == 1
    # what its owner sees: explain's notice (the job left the daemon's jobs), and the
    # AdminComment of the round that gave it back
    [n] = view(d)["notices"]
    assert n["id"] == "7" and n["kind"] == "given back" and n["user_id"] == 1000
    assert n["why"] == "given back to Slurm: " + why
    assert "8" in {j["id"] for j in view(d)["jobs"]}  # the other job is untouched


def test_a_long_run_or_a_checkpoint_ends_the_streak(tmp_path):
    b = InMemory({"7": JobState.HELD})
    long_run = crash(ran_s=900.0)  # its own time-limit checkpoint: 15 min of work
    b.ended_next = [[crash()], [crash()], [long_run], [crash()], [crash()],
                    [RunEnd("7", RunEndKind.CHECKPOINTED)], [crash()], [crash()]]  # fmt: skip
    d = daemon(tmp_path, b, max_unsignalled_restarts=3)
    try:
        records = rounds(d, 8)
    finally:
        d.store.release()
    assert b.given == [] and events(records, "crash_loop") == []
    assert d.run_watch.unsignalled == {"7": 2}


def test_a_job_that_ignores_the_signal_is_warned_then_given_back(tmp_path):
    b = InMemory({"7": JobState.HELD})
    ignored = RunEnd("7", RunEndKind.IGNORED_SIGNAL)
    b.ended_next = [[ignored], [ignored], []]
    d = daemon(tmp_path, b, max_ignored_signals=2)
    try:
        records = rounds(d, 1)
        [job] = view(d)["jobs"]
        # warned: the round's reason, then the warning (AdminComment and explain)
        assert "; warning: it ignored the checkpoint signal (SIGUSR1) 1 time in a row: " \
               "requeue-held after its grace" in job["why"]  # fmt: skip
        assert "At 2 it is given back to Slurm, not preempted" in job["why"]
        assert len(job["why"]) < 400 - len("slurm-gavel: ")  # the whole of it fits
        assert b.comments["7"] == job["why"]
        assert b.given == []
        records += rounds(d, 2)
    finally:
        d.store.release()
    assert len(b.given) == 1 and b.given[0]["7"].startswith("never checkpoints: it ignored")
    assert len(events(records, "checkpoint_signal_ignored")) == 2
    assert metric(d, "slurm_gavel_jobs_given_back_total", why="ignored_signal") == 1
    [n] = view(d)["notices"]
    assert n["kind"] == "given back" and "not preempted" in n["why"]


def test_a_job_the_signal_killed_is_told_why_in_explain(tmp_path, capsys):
    b = InMemory({"7": JobState.RUNNING})
    b.ended_next = [[], [RunEnd("7", RunEndKind.KILLED_BY_SIGNAL, "FAILED 0:10 after SIGUSR1")]]
    d = daemon(tmp_path, b)
    try:
        rounds(d, 1)
        b.jobs["7"] = JobState.DONE
        records = rounds(d, 2)
    finally:
        d.store.release()
    assert [e["job"] for e in events(records, "checkpoint_signal_killed")] == ["7"]
    v = view(d)
    [n] = v["notices"]
    assert n["kind"] == "ended" and n["why"].startswith(
        "ended by the checkpoint signal SIGUSR1 (FAILED 0:10 after SIGUSR1): its script has "
        "no handler"
    )
    assert "7" not in b.comments or "ended by" not in b.comments["7"]  # Slurm refuses it
    import argparse

    explain_notice(argparse.Namespace(json=None, jobid="7"), v, n, [])
    out = capsys.readouterr().out
    assert "job 7: ended (no longer scheduled by the daemon)" in out
    assert "trap SIGUSR1" in out and "job library" in out
    assert metric(d, "slurm_gavel_run_ends_total", kind="killed_by_signal") == 1


def test_notices_are_each_users_own_in_the_private_views():
    v = {"format": "x", "jobs": [], "notices": [
        {"id": "7", "user": "alice", "user_id": 1000, "kind": "ended", "why": "a"},
        {"id": "9", "user": "bob", "user_id": 1001, "kind": "given back", "why": "b"},
        {"id": "11", "user": None, "user_id": "1000", "kind": "ended", "why": "c"},
    ]}  # fmt: skip
    views = user_views(v)
    assert [n["id"] for n in views[1000]["notices"]] == ["7"]
    assert [n["id"] for n in views[1001]["notices"]] == ["9"]
    assert public_summary(v)["notices"] == []


@pytest.mark.hostile
@pytest.mark.parametrize(
    "raw",
    [None, [], "x", {"7": None}, {"7": {"text": 5, "time": 1, "kind": "ended"}},
     {"7": {"text": "t", "time": float("nan"), "kind": "ended"}},
     {"7": {"text": "t", "time": 1, "kind": "rm -rf"}},
     {"7": {"text": "t" * 5000, "time": True, "kind": "ended"}},
     {7: {"text": "t", "time": 1, "kind": "ended"}}],
)  # fmt: skip
def test_saved_notices_not_in_the_daemons_shape_are_dropped(raw):
    assert notices_from_json(raw) == {}


def test_saved_notices_are_read_back_bounded():
    got = notices_from_json({"7": {"text": "t" * 5000, "time": 5, "kind": "ended",
                                   "user": 3, "user_id": True}})  # fmt: skip
    assert len(got["7"].text) == 400 and got["7"].user is None and got["7"].user_id is None


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("key", "value"),
    [("max_unsignalled_restarts", 0), ("max_unsignalled_restarts", "3"),
     ("max_ignored_signals", -1), ("max_ignored_signals", 1.5), ("max_ignored_signals", 1001),
     ("short_run_seconds", -5), ("short_run_seconds", "forever"), ("max_ignored_signals", True)],
)  # fmt: skip
def test_the_counts_are_validated(tmp_path, key, value):
    with pytest.raises(ConfigError, match=key):
        parse_config({"partitions": ["gpu"], "checkpoint": {key: value}})


def test_defaults_are_small():
    c = CheckpointConfig()
    assert c.max_unsignalled_restarts == 3 and c.max_ignored_signals == 3
    w = RunWatch(c)
    assert w.to_give_back == {}


def one_job(t: float, state: JobState) -> ClusterSnapshot:
    job = ObservedJob(Job("7", "A3C", 1, total_steps=1e9, user="alice"), state,
                      gpu_type="v100", user_id=1000)  # fmt: skip
    return ClusterSnapshot(t, (Node("v100-1", "v100", 4, "gpu"),), (job,))


def watch_runs(runs: list[list[tuple[float, float]]]) -> RunWatch:
    """Each run's current-run reports (steps, run_steps), a CHECKPOINTED end between."""
    w = RunWatch(CheckpointConfig())
    t = 0.0
    for i, run in enumerate(runs):
        ends = [RunEnd("7", RunEndKind.CHECKPOINTED)] if i else []
        w.observe(ends, one_job(t, JobState.HELD))
        for steps, run_steps in run:
            t += 30
            w.observe([], one_job(t, JobState.RUNNING), {"7": (steps, steps - run_steps)})
    return w


def test_restarts_that_keep_no_progress_are_warned_not_given_back():
    # exits 99 at the signal but saves nothing: each run starts again from step 0
    w = watch_runs([[(300, 300), (600, 600)], [(12, 12), (300, 300)], [(9, 9), (400, 400)],
                    [(11, 11)]])  # fmt: skip
    assert w.no_progress == {"7": 3}
    n = w.notices["7"]
    assert n.kind == "warned" and n.text.startswith(
        "warning: its last 3 restarts kept no progress (this run resumed from step 0, the run "
        "before from 0 and reached 400): its checkpoints keep nothing"
    )
    assert w.to_give_back == {}  # the reports are the user's: a warning only


def test_restarts_from_the_checkpoint_are_not_warned_and_end_the_streak():
    good = watch_runs([[(300, 300), (600, 600)], [(700, 100), (900, 300)], [(1000, 100)]])
    assert good.no_progress == {} and good.notices == {}
    # one restart lost its work, the next resumed from a checkpoint: streak over
    w = watch_runs([[(600, 600)], [(12, 12), (300, 300)], [(400, 100), (700, 400)], [(800, 100)]])
    assert w.no_progress == {} and "7" not in w.notices
    # no reports at all: nothing known, nothing said
    silent = watch_runs([[], [], []])
    assert silent.no_progress == {} and silent.notices == {}


@pytest.mark.hostile
@pytest.mark.parametrize("steps", [0.0, 1e15, 5.0])
def test_reported_steps_cannot_buy_a_give_back(steps):
    # whatever a job reports, however many restarts: warned at most, never given back
    w = watch_runs([[(2e6, 2e6)], [(steps, steps)], [(steps, steps)], [(steps, 0.0)],
                    [(steps, steps)], [(steps, steps)]])  # fmt: skip
    assert w.to_give_back == {}
    assert all(n.kind == "warned" for n in w.notices.values())


def test_max_ignored_signals_0_warns_only(tmp_path):
    b = InMemory({"7": JobState.HELD})
    ignored = RunEnd("7", RunEndKind.IGNORED_SIGNAL)
    b.ended_next = [[ignored]] * 5
    d = daemon(tmp_path, b, max_ignored_signals=0)
    try:
        rounds(d, 5)
    finally:
        d.store.release()
    assert b.given == []
    assert "5 times in a row" in d.run_watch.notices["7"].text
    assert "given back" not in d.run_watch.notices["7"].text


def test_a_crash_loop_is_told_before_it_is_given_back(tmp_path):
    b = InMemory({"7": JobState.HELD})
    b.ended_next = [[crash()], [crash(ran_s=900.0)]]
    d = daemon(tmp_path, b, max_unsignalled_restarts=3)
    try:
        rounds(d, 1)
        [job] = view(d)["jobs"]  # placed again, and its reason says what is coming
        assert job["why"].endswith(
            "; warning: its last 1 run ended without the checkpoint signal within 600 s of "
            "its start (last: SPECIAL_EXIT, exit code 99); at 3 in a row it is given back to "
            "Slurm as a crash loop"
        )
        assert b.comments["7"] == job["why"]
        rounds(d, 1)  # a long run: the streak and its warning are over
        [job] = view(d)["jobs"]
        assert "warning" not in job["why"] and d.run_watch.notices == {}
    finally:
        d.store.release()


def test_a_given_back_jobs_admin_comment_is_tried_once_even_after_a_restart(tmp_path):
    # the daemon restarted after job 5 was given back and ended: its notice is loaded
    # with the state, and Slurm refuses an AdminComment on a finished job
    b = InMemory({"7": JobState.HELD})
    b.finished = {"5"}
    d = daemon(tmp_path, b)
    d.run_watch.notices = notices_from_json(
        {"5": {"text": "given back to Slurm: crash loop: ...", "time": 1000.0,
               "kind": "given back", "user": "alice", "user_id": 1000}}
    )  # fmt: skip
    try:
        rounds(d, 3)
    finally:
        d.store.release()
    assert sum("5" in c for c in b.comment_calls) == 1
    assert [n["id"] for n in view(d)["notices"]] == ["5"]  # explain still says why


def test_a_running_job_is_given_back_only_once_it_waits(tmp_path):
    # moved at its preemption (requeue-held, started elsewhere at once): running when
    # its second ignored signal is seen; given back when it next waits, not before
    b = InMemory({"7": JobState.RUNNING})
    ignored = RunEnd("7", RunEndKind.IGNORED_SIGNAL)
    b.ended_next = [[ignored], [ignored], [], []]
    d = daemon(tmp_path, b, max_ignored_signals=2)
    try:
        rounds(d, 3)
        assert b.given == [] and d.run_watch.to_give_back.keys() == {"7"}
        assert metric(d, "slurm_gavel_jobs_given_back_total", why="ignored_signal") == 0
        b.jobs["7"] = JobState.HELD
        rounds(d, 1)
    finally:
        d.store.release()
    assert [list(g) for g in b.given] == [["7"]]
    assert metric(d, "slurm_gavel_jobs_given_back_total", why="ignored_signal") == 1


# ---- the streaks across a restart ------------------------------------------------------


def restarted(tmp_path: Path, b: InMemory, first: int, **checkpoint: Any) -> Daemon:
    """A daemon that ran ``first`` rounds and stopped, and its successor on the same
    state directory (started: it loaded the state)."""
    d = daemon(tmp_path, b, **checkpoint)
    try:
        rounds(d, first)
    finally:
        d.store.release()
    return daemon(tmp_path, b, **checkpoint)


def test_a_restart_mid_loop_goes_on_counting_it_grants_no_fresh_tries(tmp_path):
    b = InMemory({"7": JobState.HELD, "8": JobState.HELD})
    # two short runs before the restart, the third after it
    b.ended_next = [[], [crash()], [crash()], [crash()], []]
    d = restarted(tmp_path, b, 3, max_unsignalled_restarts=3)
    try:
        assert d.run_watch.unsignalled == {"7": 2}  # loaded, not forgotten
        records = rounds(d, 2)
    finally:
        d.store.release()
    # given back at its third short run in a row, as without the restart
    assert [list(g) for g in b.given] == [["7"]]
    assert b.given[0]["7"].startswith("crash loop: its last 3 runs")
    assert [e["job"] for e in events(records, "crash_loop")] == ["7"]
    # placed at each round until its third short run, none after: as without the restart
    assert [("7" in s) for s in b.started] == [True, True, True, False, False]


def test_a_restart_keeps_the_ignored_signals_and_a_give_back_still_to_do(tmp_path):
    # running at its second ignored signal (moved at once): the give back waits for it
    # to wait, across the restart
    b = InMemory({"7": JobState.RUNNING})
    ignored = RunEnd("7", RunEndKind.IGNORED_SIGNAL)
    b.ended_next = [[ignored], [ignored], []]
    d = restarted(tmp_path, b, 3, max_ignored_signals=2)
    try:
        assert b.given == [] and set(d.run_watch.to_give_back) == {"7"}
        b.jobs["7"] = JobState.HELD
        rounds(d, 1)
    finally:
        d.store.release()
    assert [list(g) for g in b.given] == [["7"]]
    assert b.given[0]["7"].startswith("never checkpoints: it ignored the checkpoint signal")
    assert metric(d, "slurm_gavel_jobs_given_back_total", why="ignored_signal") == 1


def test_one_ignored_signal_before_a_restart_counts_after_it(tmp_path):
    b = InMemory({"7": JobState.HELD})
    ignored = RunEnd("7", RunEndKind.IGNORED_SIGNAL)
    b.ended_next = [[ignored], [ignored]]
    d = restarted(tmp_path, b, 1, max_ignored_signals=2)
    try:
        assert d.run_watch.ignored == {"7": 1}
        rounds(d, 1)
    finally:
        d.store.release()
    assert [list(g) for g in b.given] == [["7"]]


def test_a_state_file_without_the_streaks_still_loads(tmp_path):
    # an older daemon's state.json: no run_watch key (and the other keys as ever)
    b = InMemory({"7": JobState.HELD})
    b.ended_next = [[crash()], [crash()]]
    d = daemon(tmp_path, b, max_unsignalled_restarts=3)
    try:
        rounds(d, 1)
    finally:
        d.store.release()
    path = tmp_path / "s" / "state.json"
    doc = json.loads(path.read_text())
    assert doc["run_watch"]["unsignalled"] == {"7": 1}
    del doc["run_watch"]
    path.write_text(json.dumps(doc))
    d = daemon(tmp_path, b, max_unsignalled_restarts=3)
    try:
        assert d.run_watch.unsignalled == {}
        rounds(d, 1)  # counts afresh from the old file, as that daemon did
        assert d.run_watch.unsignalled == {"7": 1} and b.given == []
    finally:
        d.store.release()


@pytest.mark.hostile
@pytest.mark.parametrize(
    "raw",
    [None, [], "x", 5, {"unsignalled": None, "ignored": [], "to_give_back": "7"},
     {"unsignalled": {"7": True}}, {"unsignalled": {"7": 0}}, {"unsignalled": {"7": -3}},
     {"unsignalled": {"7": 2.5}}, {"unsignalled": {"7": "3"}}, {"ignored": {"": 2}},
     {"ignored": {"7" * 65: 2}}, {"ignored": {"7": None}}, {"ignored": {"7": float("inf")}},
     {"to_give_back": {"7": "crash loop"}},
     {"to_give_back": {"7": {"why": 5, "label": "crash_loop"}}},
     {"to_give_back": {"7": {"why": "", "label": "crash_loop"}}},
     {"to_give_back": {"7": {"why": "w", "label": "rm -rf /"}}},
     {"to_give_back": {"7": {"why": "w"}}}],
)  # fmt: skip
def test_saved_streaks_not_in_the_daemons_shape_are_dropped(raw):
    w = RunWatch()
    w.load_streaks(raw)
    assert (w.unsignalled, w.ignored, w.to_give_back, w.give_back_why) == ({}, {}, {}, {})


@pytest.mark.hostile
def test_saved_streaks_are_read_back_bounded_and_decide_as_the_limit_does():
    w = RunWatch(CheckpointConfig(max_unsignalled_restarts=3))
    back = {"why": "x" * 5000, "label": "ignored_signal"}
    w.load_streaks({"unsignalled": {"7": 10**40, "8": 1}, "to_give_back": {"9": back}})
    assert w.unsignalled == {"7": 1_000_000, "8": 1}
    assert len(w.to_give_back["9"]) == 400 and w.give_back_why["9"] == "ignored_signal"
    # a huge saved count is a crash loop at the next short run, no more
    held = [ObservedJob(Job(j, "A3C", 1, user="alice"), JobState.HELD) for j in ("7", "8", "9")]
    snap = ClusterSnapshot(5.0, (), tuple(held))
    w.observe([crash("7"), crash("8")], snap)
    assert set(w.to_give_back) == {"7", "9"} and w.unsignalled["8"] == 2
    assert w.streaks_json()["to_give_back"]["7"]["label"] == "crash_loop"
