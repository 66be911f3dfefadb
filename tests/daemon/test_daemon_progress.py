"""The progress spool as a hostile user sees it: the daemon never blocks, never
trusts a file that is not the job's own, refuses absurd numbers, and moves the shared
throughput table only on the agreement of several users, a bounded step per round.

We run as root: other users are played by uids 1001, 1002, 2000 (files chown'ed to them,
or forked children that drop to them), `nobody` is 65534.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_gavel.core import estimate
from slurm_gavel.daemon.progress_cells import (
    MAX_VOTES_PER_CELL,
    MAX_VOTES_PER_USER,
    STEP_FACTOR,
    agreed_value,
)
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.job.progress import FORMAT, ProgressReporter

pytestmark = pytest.mark.hostile

ALICE, BOB, MALLORY, NOBODY = 1001, 1002, 2000, 65534
NOW = 1_000_000.0
A3C = "A3C"


@pytest.fixture
def table() -> ThroughputTable:
    return ThroughputTable(alone={(A3C, 1): {"v100": 10.0, "k80": 2.0, "p100": 0.0},
                                  ("LM", 1): {"v100": 4.0}})  # fmt: skip


@pytest.fixture
def events(daemon_log: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return daemon_log  # tests/conftest.py


def problems(records: list[logging.LogRecord], name: str = "progress_refused") -> list[str]:
    return [
        str(getattr(r, "fields", {}).get("problem", getattr(r, "fields", {})))
        for r in records
        if getattr(r, "event", None) == name
    ]


def running(
    i: int | str,
    uid: int | None,
    *,
    jt: str = A3C,
    gpu: str = "v100",
    restarts: int = 0,
    total: float = 0.0,
    arrival: float = NOW - 3600,
) -> ObservedJob:
    job = Job(str(i), jt, total_steps=total, arrival_time=arrival)
    slices = (NodeSlice(f"{gpu}-0", 1),)
    return ObservedJob(job, JobState.RUNNING, gpu, slices, restarts=restarts, user_id=uid)


def snap(*jobs: ObservedJob, time: float = NOW) -> ClusterSnapshot:
    return ClusterSnapshot(time, (), tuple(jobs))


def report(job_id: str, **over: Any) -> dict[str, Any]:
    doc = {"format": FORMAT, "job_id": job_id, "job_type": A3C, "steps": 10,
           "steps_per_s": 10.0, "run_steps": 10, "restart_count": 0, "state": "running",
           "hostname": "n", "gpu": "x", "updated": NOW - 5}  # fmt: skip
    return {**doc, **over}


def put(path: Path, content: str | dict[str, Any], owner: int) -> Path:
    """A file as user `owner` would leave it (in a folder made like the daemon makes it)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o2750)
        os.chown(path.parent, int(path.parent.name), os.getegid())
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    os.chown(path, owner, owner)
    return path


def both(spool: Path, uid: int, name: str) -> list[Path]:
    """Where a report of `name` lies: the per-user folder (if made), and the flat spool of
    old (so that each attack also reaches the code before the trust boundary's checks)."""
    return [p for p in (spool / str(uid) / name, spool / name) if p.parent.is_dir()]


def tracker(spool: Path, table: ThroughputTable) -> ProgressTracker:
    return ProgressTracker(spool, table=table)


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """fn() in a thread; fails if it has not returned within `seconds` (never hangs)."""
    got: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            got.append(fn())
        except BaseException as e:  # handed to the test thread
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still blocked after {seconds} s"
    if errors:
        raise errors[0]
    return got[0]


def as_user(uid: int, gid: int, fn: Callable[[], Any]) -> Any:
    """fn() in a forked child running as uid:gid (no capabilities); its result or error."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            out: Any = ("ok", fn())
        except BaseException as e:
            out = ("error", f"{type(e).__name__}: {e}")
        with os.fdopen(w, "wb") as f:
            pickle.dump(out, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "error":
        raise AssertionError(f"as uid {uid}: {value}")
    return value


# ---- the spool's layout -------------------------------------------------------------------


def test_the_daemon_makes_one_folder_per_user_that_only_the_user_writes(spool, table):
    t = tracker(spool, table)
    t.merge(snap(running(1, ALICE), running(2, BOB), running(3, ALICE)))
    for uid in (ALICE, BOB):
        st = (spool / str(uid)).stat()
        assert (st.st_uid, st.st_gid) == (uid, os.getegid())
        assert stat.S_IMODE(st.st_mode) == 0o2750  # setgid: reports inherit our group
    assert sorted(p.name for p in spool.iterdir()) == [str(ALICE), str(BOB)]


def test_a_user_cannot_write_into_another_users_folder_but_their_job_writes_its_own(spool, table):
    t = tracker(spool, table)
    t.merge(snap(running(7, ALICE)))  # the job is seen (held) before it runs: folder made

    def mallory_plants() -> list[str]:
        out = []
        for where in (spool / str(ALICE) / "7.json", spool / "7.json"):
            try:
                where.write_text(json.dumps(report("7", steps=999999)))
                out.append(f"wrote {where}")
            except PermissionError:
                pass
        return out

    assert as_user(MALLORY, MALLORY, mallory_plants) == []

    def alice_reports() -> None:
        rep = ProgressReporter("7", A3C, spool, interval=0.0, restart_count=0, start_step=40)
        for _ in range(3):
            rep.step_done()
        rep.write("running")

    as_user(ALICE, ALICE, alice_reports)
    now = time.time()  # the report carries the real time
    got = t.merge(snap(running(7, ALICE, arrival=now - 60), time=now))
    assert got.jobs[0].steps_done == 43


def test_a_daemon_without_root_hands_folders_over_with_cap_chown_only_and_reads_by_group(
    spool, table
):
    daemon_uid = daemon_gid = 3000
    os.chown(spool, daemon_uid, daemon_gid)

    def unprivileged_merge() -> list[str]:
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        logging.getLogger("slurm_gavel.daemon").addHandler(handler)
        tracker(spool, table).merge(snap(running(1, ALICE)))
        return problems(records)

    said = as_user(daemon_uid, daemon_gid, unprivileged_merge)
    assert any("needs CAP_CHOWN" in p for p in said), said
    assert not (spool / str(ALICE)).exists()  # nothing half-made is left behind

    # What the same daemon does with CAP_CHOWN (done here by hand, as root):
    (spool / str(ALICE)).mkdir(mode=0o700)
    (spool / str(ALICE)).chmod(0o2750)
    os.chown(spool / str(ALICE), ALICE, daemon_gid)

    def alice_reports() -> None:
        rep = ProgressReporter("1", A3C, spool, interval=0.0)
        rep.step_done()
        rep.write("running")

    as_user(ALICE, ALICE, alice_reports)
    mine = spool / str(ALICE) / "1.json"
    assert mine.stat().st_gid == daemon_gid  # inherited through the setgid bit

    def unprivileged_read() -> float | None:
        now = time.time()
        job = running(1, ALICE, arrival=now - 60)
        return tracker(spool, table).merge(snap(job, time=now)).jobs[0].steps_done

    assert as_user(daemon_uid, daemon_gid, unprivileged_read) == 1

    # A folder made when the daemon ran as root (group root) is named with the fix.
    os.chown(spool / str(ALICE), ALICE, 0)
    said = as_user(daemon_uid, daemon_gid, unprivileged_merge)
    assert any(f"fix: chgrp -R {daemon_gid}" in p for p in said), said


@pytest.mark.parametrize(
    "setup, says",
    [
        (lambda root: root.chmod(0o1777), "writable by others"),
        (lambda root: (root / str(ALICE)).symlink_to("/tmp"), "not a folder"),
        (lambda root: (root / str(ALICE)).mkdir() or os.chown(root / str(ALICE), MALLORY, 0),
         f"belongs to uid {MALLORY}"),
        (lambda root: (root / str(ALICE)).mkdir(mode=0o777) or os.chown(root / str(ALICE), ALICE, 0)
         or (root / str(ALICE)).chmod(0o777), "fix: chmod 2750"),
    ],
    ids=["spool-1777", "user-dir-symlink", "user-dir-of-another", "user-dir-world-writable"],
)  # fmt: skip
def test_an_untrustworthy_spool_or_user_folder_is_refused_with_the_fix(
    spool, table, events, setup, says
):
    setup(spool)
    for path in both(spool, ALICE, "1.json"):
        if path.parent.is_dir() and not path.parent.is_symlink():
            put(path, report("1"), ALICE)
    got = tracker(spool, table).merge(snap(running(1, ALICE)))
    assert got.jobs[0].steps_done is None
    assert any(says in p for p in problems(events)), problems(events)


# ---- files that are not reports -----------------------------------------------------------


def test_a_fifo_named_like_a_report_never_blocks_the_round(spool, table, events):
    t = tracker(spool, table)
    t.merge(snap(running(1, ALICE)))
    for path in both(spool, ALICE, "1.json"):
        os.mkfifo(path)
        os.chown(path, ALICE, ALICE)
    got = within(20, lambda: t.merge(snap(running(1, ALICE))))
    assert got.jobs[0].steps_done is None
    assert any("not a regular file" in p for p in problems(events))


@pytest.mark.parametrize(
    "plant",
    ["symlink-to-dev-zero", "symlink-to-another-users-report", "device", "directory",
     "huge-sparse-file", "file-of-another-user"],
)  # fmt: skip
def test_a_report_that_is_not_the_jobs_own_regular_file_is_refused(spool, table, events, plant):
    t = tracker(spool, table)
    t.merge(snap(running(1, ALICE)))
    bobs = put(spool / str(BOB) / "9.json", report("1", steps=777), BOB)
    for path in both(spool, ALICE, "1.json"):
        if plant == "symlink-to-dev-zero":
            path.symlink_to("/dev/zero")
        elif plant == "symlink-to-another-users-report":
            path.symlink_to(bobs)
        elif plant == "device":
            os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
        elif plant == "directory":
            path.mkdir()
        elif plant == "huge-sparse-file":
            with open(path, "wb") as f:
                f.truncate(10 * 2**20)
        else:
            put(path, report("1", steps=777), NOBODY)
        if not path.is_symlink():
            os.chown(path, NOBODY if plant == "file-of-another-user" else ALICE, ALICE)
    got = within(20, lambda: t.merge(snap(running(1, ALICE))))
    assert got.jobs[0].steps_done is None
    assert problems(events), "refused without a word to the admin"


def test_a_report_in_the_attackers_own_folder_does_not_count_for_the_victims_job(spool, table):
    t = tracker(spool, table)
    t.merge(snap(running(1, ALICE), running(2, MALLORY)))
    for path in (spool / str(MALLORY) / "1.json", spool / "1.json"):
        put(path, report("1", steps=5, steps_per_s=50.0), MALLORY)
    got = t.merge(snap(running(1, ALICE), running(2, MALLORY)))
    assert got.jobs[0].steps_done is None and got.jobs[0].measured_throughput is None
    assert not t.cells


# ---- numbers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(report("1", steps_per_s=float("nan"))),
        json.dumps(report("1", steps_per_s=float("inf"))),
        json.dumps(report("1", updated=float("nan"))),
        json.dumps(report("1")).replace('"steps_per_s": 10.0', '"steps_per_s": 1e400'),
        json.dumps(report("1", steps_per_s=1e308)),
        json.dumps(report("1", steps_per_s=1e12)),
        json.dumps(report("1", steps_per_s=-3.0)),
        json.dumps(report("1", steps=1e308)),
        json.dumps(report("1", steps=-10)),
        json.dumps(report("1", updated=NOW + 3600)),  # from the future
        json.dumps(report("1", updated=NOW - 86400)),  # before the job was submitted
        json.dumps(report("2")),  # another job's report under this job's name
        json.dumps({**report("1"), "job_id": True}),
        "[" * 30_000 + "]" * 30_000,  # nesting that would blow the parser's stack
        json.dumps(report("1", steps="\x1b]0;owned\x07\x1b[2J")),  # terminal escapes
    ],
    ids=["nan-rate", "inf-rate", "nan-time", "1e400", "1e308-rate", "1e12-rate", "negative-rate",
         "1e308-steps", "negative-steps", "future", "older-than-the-job", "other-job-id",
         "bool-job-id", "deep-nesting", "escapes-in-steps"],
)  # fmt: skip
def test_a_report_with_a_hostile_number_is_refused_whole(spool, table, events, text):
    t = tracker(spool, table)
    t.merge(snap(running(1, ALICE)))
    for path in both(spool, ALICE, "1.json"):
        put(path, text, ALICE)
    got = t.merge(snap(running(1, ALICE)))
    assert got.jobs[0].steps_done is None  # not even the plausible step count
    assert got.jobs[0].measured_throughput is None and not t.cells
    assert problems(events), "refused without a word to the admin"
    assert not any("\x1b" in p or "\x07" in p for p in problems(events))  # escaped for logs
    json.dumps(t.to_json(), allow_nan=False)  # raises on NaN/inf


def test_steps_are_capped_at_the_jobs_total(spool, table):
    t = tracker(spool, table)
    job = running(1, ALICE, total=500)
    t.merge(snap(job))
    for path in both(spool, ALICE, "1.json"):
        put(path, report("1", steps=10**12), ALICE)
    assert t.merge(snap(job)).jobs[0].steps_done == 500


def test_the_current_runs_reports_say_where_the_run_resumed(spool, table):
    """What the run watch reads (daemon/run_watch.py): steps less run_steps, of reports
    of the current run only; a hostile run_steps is not a resume point."""
    t = tracker(spool, table)
    job = running(1, ALICE, restarts=2)
    t.merge(snap(job))
    cases = [
        (report("1", steps=900, run_steps=300, restart_count=2), {"1": (900.0, 600.0)}),
        (report("1", steps=900, run_steps=300, restart_count=1), {}),  # the last run's
        (report("1", steps=900, run_steps=300, restart_count=2, state="checkpointed"), {}),
        (report("1", steps=900, run_steps=300, restart_count=2, updated=NOW - 3600), {}),
        (report("1", steps=900, run_steps=901, restart_count=2), {}),  # more than steps
        (report("1", steps=900, run_steps=-1, restart_count=2), {}),
        (report("1", steps=900, run_steps="300", restart_count=2), {}),
        (report("1", steps=900, run_steps=None, restart_count=2), {}),
        (report("1", steps=900, run_steps=True, restart_count=2), {}),
        (report("1", steps=900, run_steps=300, restart_count=True), {}),
    ]
    for doc, expected in cases:
        for path in both(spool, ALICE, "1.json"):
            put(path, doc, ALICE)
        t.merge(snap(job))
        assert t.current_runs == expected, doc


# ---- the shared table ----------------------------------------------------------------------


def vote_rounds(spool: Path, t: ProgressTracker, rates: dict[tuple[str, int], float],
                rounds: int, jt: str = A3C, gpu: str = "v100") -> None:  # fmt: skip
    """`rounds` rounds in which job `id` of user `uid` reports `rate` on (jt, gpu)."""
    jobs = [running(j, uid, jt=jt, gpu=gpu) for (j, uid) in rates]
    t.merge(snap(*jobs))
    for r in range(rounds):
        now = NOW + 60 * r
        for (j, uid), rate in rates.items():
            for path in both(spool, uid, f"{j}.json"):
                put(path, report(j, job_type=jt, steps_per_s=rate, updated=now - 1), uid)
        t.merge(snap(*jobs, time=now))


def table_value(t: ProgressTracker, table: ThroughputTable, jt: str = A3C, gpu: str = "v100"):
    new = estimate.update_table(table, t.table_observations())
    return new.alone.get((jt, 1), {}).get(gpu)


def test_one_user_cannot_move_a_cell_however_many_jobs_they_run(spool, table):
    t = tracker(spool, table)
    vote_rounds(spool, t, {("1", MALLORY): 50.0, ("2", MALLORY): 50.0, ("3", MALLORY): 50.0}, 5)
    assert table_value(t, table) == 10.0


def test_an_absurd_claim_is_refused_and_the_cell_stays(spool, table, events):
    t = tracker(spool, table)
    vote_rounds(spool, t, {("1", ALICE): 1e12, ("2", BOB): 1e12}, 3)
    assert table_value(t, table) == 10.0
    # (1e12 steps/s: refused by the spool's check, over 10^7, before the table's)
    assert any("is not in 0..1e+07" in p for p in problems(events))


def test_agreeing_users_move_a_cell_a_bounded_step_per_round_and_within_the_drift_cap(spool, table):
    t = tracker(spool, table)
    vote_rounds(spool, t, {("1", ALICE): 40.0, ("2", BOB): 40.0}, 1)
    assert t.cells[f"{A3C}|1|v100"].value == pytest.approx(10.0 * STEP_FACTOR)
    vote_rounds(spool, t, {("1", ALICE): 40.0, ("2", BOB): 40.0}, 30)
    assert t.cells[f"{A3C}|1|v100"].value == pytest.approx(40.0)  # there, not beyond
    t2 = tracker(spool, table)
    vote_rounds(spool, t2, {("1", ALICE): 900.0, ("2", BOB): 900.0}, 40)
    assert t2.cells[f"{A3C}|1|v100"].value == pytest.approx(10.0 * estimate.MAX_DRIFT)
    # a measured cell folds in only `smoothing` of it, and never past the drift cap
    assert 10.0 < table_value(t2, table) <= 10.0 * estimate.MAX_DRIFT


def test_a_liar_beside_an_honest_user_cannot_pull_past_the_honest_claim(spool, table):
    t = tracker(spool, table)
    vote_rounds(spool, t, {("1", ALICE): 12.0, ("2", MALLORY): 900.0}, 20)
    assert t.cells[f"{A3C}|1|v100"].value == pytest.approx(12.0)
    assert agreed_value(10.0, [12.0, 900.0]) == pytest.approx(12.0)
    assert agreed_value(10.0, [5.0, 900.0]) == 10.0  # the two disagree on the direction
    assert agreed_value(10.0, [900.0]) == 10.0


def test_made_up_job_types_and_cannot_run_cells_learn_nothing_and_cost_no_memory(spool, table):
    t = tracker(spool, table)
    for i in range(200):
        vote_rounds(spool, t, {(f"{i}a", ALICE): 3.0, (f"{i}b", BOB): 3.0}, 1, jt=f"made-up {i}")
    vote_rounds(spool, t, {("x", ALICE): 3.0, ("y", BOB): 3.0}, 3, gpu="p100")  # 0: cannot run
    assert not t.cells
    new = estimate.update_table(table, t.table_observations())
    assert new.alone == table.alone


def test_votes_per_cell_are_capped_and_what_is_said_follows_the_live_jobs(spool, table, events):
    t = tracker(spool, table)
    jobs = {(str(i), 5000 + i): 11.0 for i in range(MAX_VOTES_PER_CELL * 3)}
    vote_rounds(spool, t, jobs, 1)
    assert len(t.cells[f"{A3C}|1|v100"].votes) == MAX_VOTES_PER_CELL
    crowd = {(f"m{i}", MALLORY): 11.0 for i in range(100)}  # one user's many jobs
    vote_rounds(spool, t, crowd, 1)
    votes = t.cells[f"{A3C}|1|v100"].votes.values()
    assert sum(v.uid == MALLORY for v in votes) == MAX_VOTES_PER_USER
    assert len({v.uid for v in votes}) > MAX_VOTES_PER_CELL / 2  # the others still count
    liars = {(str(i), 5000 + i): 1e12 for i in range(50)}
    vote_rounds(spool, t, liars, 1)
    assert len(problems(events)) == 50 and len(t._said) == 50
    t.merge(snap(running("0", 5000)))
    assert len(t._said) == 1  # jobs no longer listed are forgotten


# ---- the state file --------------------------------------------------------------------------


def test_the_state_never_holds_nan_and_an_older_poisoned_state_is_repaired(spool, table, events):
    t = tracker(spool, table)
    older = {"observations": [{"job_type": A3C, "scale_factor": 1, "gpu_type": "v100",
                               "steps_per_s": float("nan"), "samples": 3},
                              {"job_type": "made-up", "scale_factor": 1, "gpu_type": "v100",
                               "steps_per_s": 3e11, "samples": 1}],
             "seen": {"1": 5.0}}  # fmt: skip
    t.load(json.loads(json.dumps(older)))
    assert not t.cells and not t.table_observations()
    assert problems(events, "progress_state_repaired")
    current = {"format": 2, "cells": [
        {"job_type": A3C, "scale_factor": 1, "gpu_type": "v100", "value": float("nan"),
         "agreed": 2, "votes": []},
        {"job_type": A3C, "scale_factor": 1, "gpu_type": "k80", "value": 1e308, "agreed": 2,
         "votes": []},
        {"job_type": "made-up", "scale_factor": 1, "gpu_type": "v100", "value": 3.0,
         "agreed": 2, "votes": []},
        {"job_type": "LM", "scale_factor": 1, "gpu_type": "v100", "value": 5.0, "agreed": 2,
         "votes": [{"job": "1", "uid": ALICE, "rate": float("inf"), "at": NOW},
                   {"job": "2", "uid": BOB, "rate": 5.0, "at": NOW}]},
    ]}  # fmt: skip
    t2 = tracker(spool, table)
    t2.load(json.loads(json.dumps(current)))
    assert list(t2.cells) == ["LM|1|v100"] and list(t2.cells["LM|1|v100"].votes) == ["2"]
    json.dumps(t2.to_json(), allow_nan=False)  # raises on NaN/inf


def test_the_daemon_learns_from_agreeing_users_and_keeps_it_across_a_restart(tmp_path, spool):
    from slurm_gavel.backends.cluster_spec import parse_cluster_spec
    from slurm_gavel.backends.simulated import SimulatedCluster
    from slurm_gavel.daemon.config import parse_config
    from slurm_gavel.daemon.daemon import Daemon
    from slurm_gavel.daemon.metrics import DaemonMetrics
    from slurm_gavel.domain.throughputs import load_table

    full = load_table()
    jt = "A3C"
    jobs = [Job(str(i), jt, 1, total_steps=1e7) for i in range(1, 5)]
    sim = SimulatedCluster(
        parse_cluster_spec("v100:1x4"), jobs, full, preemption_overhead_seconds=5.0
    )
    base = full.alone[(jt, 1)]["v100"]

    class Reporting:
        """Slurm as the daemon sees it (a uid per job), and each running job reporting
        1.2x the table's rate (jobs 1, 3: Alice; 2, 4: Bob)."""

        def __init__(self) -> None:
            self.inner = sim

        def observe(self) -> ClusterSnapshot:
            s = sim.observe()
            out = []
            for o in s.jobs:
                o = replace(o, steps_done=None, user_id=ALICE if int(o.job.id) % 2 else BOB)
                if o.state is JobState.RUNNING and (spool / str(o.user_id)).is_dir():
                    put(spool / str(o.user_id) / f"{o.job.id}.json",
                        report(o.job.id, steps=100 + int(o.job.id), steps_per_s=base * 1.2,
                               updated=s.time), o.user_id)  # fmt: skip
                out.append(o)
            return replace(s, jobs=tuple(out))

        def act(self, placement):
            return sim.act(placement)

    state = str(tmp_path / "state")
    cfg = parse_config(
        {
            "partitions": ["gpu"],
            "round_seconds": 60.0,
            "state_dir": state,
            "progress_dir": str(spool),
        }
    )
    d = Daemon(cfg, Reporting(), table=full, metrics=DaemonMetrics())  # type: ignore[arg-type]
    d.start()
    for _ in range(4):
        d.round()
        sim.advance(sim.clock + 60.0)
    assert all(d.state.jobs[j].steps_done == 100 + int(j) for j in d.state.jobs)
    cell = d.progress.cells[f"{jt}|1|v100"]  # type: ignore[union-attr]
    assert base < cell.value <= base * 1.2
    assert base < d.sched_config.table.alone[(jt, 1)]["v100"] <= base * 1.2
    saved = json.loads((tmp_path / "state" / "state.json").read_text())
    json.dumps(saved, allow_nan=False)
    d.store.release()
    d2 = Daemon(cfg, Reporting(), table=full, metrics=DaemonMetrics())  # type: ignore[arg-type]
    d2.start()
    assert d2.progress.cells[f"{jt}|1|v100"].value == cell.value  # type: ignore[union-attr]
    d2.store.release()
