"""The daemon loop against the simulated backend: persistence, crash recovery, retries."""

from __future__ import annotations

import gc
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from daemon_records import daemon_records

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.backends.slurm.slurm_errors import SlurmUnreachable
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.gpu_names import to_slurm_names, to_table_names
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.state_store import StateLockedError, StateStore
from slurm_gavel.daemon.status_view import status_view
from slurm_gavel.domain.cluster_model import ActResult, RoundPlacement
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table

ROUND = 60.0
TYPES = ["ResNet-50 (batch size 64)", "A3C", "Transformer (batch size 64)", "LM (batch size 5)"]


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after the raise point runs."""


@pytest.fixture(scope="module")
def table():
    return load_table()


def cluster(table) -> SimulatedCluster:
    jobs = [Job(str(i), TYPES[i % len(TYPES)], 1, total_steps=1e7) for i in range(8)]
    return SimulatedCluster(parse_cluster_spec("v100:1x2,p100:1x2,k80:1x2"), jobs, table,
                            preemption_overhead_seconds=5.0)  # fmt: skip


def config(tmp_path, **over):
    doc = {
        "partitions": ["gpu"],
        "round_seconds": ROUND,
        "checkpoint": {"grace_seconds": 5},
        "state_dir": str(tmp_path / "state"),
        "slurm": {"retry_initial_seconds": 1, "retry_max_seconds": 4},
        **over,
    }
    return parse_config(doc)


def daemon(tmp_path, backend, table, **kw) -> Daemon:
    return Daemon(config(tmp_path), backend, table=table, metrics=DaemonMetrics(), **kw)


def rounds(d: Daemon, sim: SimulatedCluster, n: int) -> None:
    for _ in range(n):
        d.round()
        sim.advance(sim.clock + ROUND)


def received(d: Daemon) -> dict[str, dict[str, float]]:
    return {j: dict(a.received_s) for j, a in sorted(d.state.jobs.items())}


class KillingBackend:
    """Delegates to a backend; raises Killed before or after the n-th act call."""

    def __init__(self, inner, kill_at: int, after_act: bool) -> None:
        self.inner, self.kill_at, self.after_act, self.calls = inner, kill_at, after_act, 0

    def observe(self):
        return self.inner.observe()

    def act(self, placement: RoundPlacement) -> ActResult:
        self.calls += 1
        if self.calls == self.kill_at and not self.after_act:
            raise Killed
        result = self.inner.act(placement)
        if self.calls == self.kill_at:
            raise Killed
        return result


def killed_in_its_third_round(d: Daemon, sim: SimulatedCluster) -> None:
    """A daemon whose backend is a KillingBackend(kill_at=3) started, two rounds run and
    the third killed; its state lock released, as the kernel does when the process dies."""
    d.start()
    rounds(d, sim, 2)
    with pytest.raises(Killed):
        d.round()
    d.store.release()


@contextmanager
def started(d: Daemon) -> Iterator[Daemon]:
    """The daemon started, its state lock released at the end whatever happens."""
    d.start()
    try:
        yield d
    finally:
        d.store.release()


def test_state_is_saved_every_round_and_reloaded(tmp_path, table):
    sim = cluster(table)
    d = daemon(tmp_path, sim, table)
    d.start()
    rounds(d, sim, 3)
    d.store.release()
    doc = StateStore(tmp_path / "state").load()
    assert doc["scheduler"]["round_index"] == 3 and doc["inflight"] is None
    assert len(doc["jobs"]) == 8
    running = [j for j, v in doc["jobs"].items() if v["state"] in ("running", "starting")]
    assert len(running) == 6  # 6 GPUs, 8 one-GPU jobs
    d2 = daemon(tmp_path, sim, table)
    d2.start()
    assert received(d2) == received(d) and d2.state.round_index == 3
    # 3 rounds x 6 GPUs of service, minus the first round (nothing ran before it)
    total = sum(sum(r.values()) for r in received(d2).values())
    assert total == pytest.approx(2 * ROUND * 6)


class ResumingBackend(KillingBackend):
    """Records the jobs a (re)started daemon hands SlurmBackend.resume()."""

    def __init__(self, inner) -> None:
        super().__init__(inner, kill_at=0, after_act=True)
        self.resumed: list[list[str]] = []

    def resume(self, job_ids) -> None:
        self.resumed.append(list(job_ids))


def test_a_restarted_daemon_tells_the_backend_the_jobs_it_managed(tmp_path, table):
    """So that SlurmBackend reads how those no longer listed ended (24.11+ no longer
    read every finished job on the first observe: slurm/cli/listing.py)."""
    sim = cluster(table)
    first = ResumingBackend(sim)
    d = daemon(tmp_path, first, table)
    d.start()
    assert first.resumed == []  # a new state: nothing managed before
    rounds(d, sim, 2)
    d.store.release()
    again = ResumingBackend(sim)
    daemon(tmp_path, again, table).start()
    assert [sorted(ids) for ids in again.resumed] == [sorted(d.state.jobs)]
    assert len(again.resumed[0]) == 8


@pytest.mark.parametrize("after_act", [True, False])
def test_killed_mid_round_resumes_without_losing_accounting(tmp_path, table, after_act):
    # Reference: an uninterrupted daemon on an identical cluster.
    ref_sim = cluster(table)
    ref = daemon(tmp_path / "ref", ref_sim, table)
    ref.start()
    rounds(ref, ref_sim, 6)

    sim = cluster(table)
    d = daemon(tmp_path, KillingBackend(sim, kill_at=3, after_act=after_act), table)
    killed_in_its_third_round(d, sim)
    doc = StateStore(tmp_path / "state").load()
    assert doc["inflight"]["round_index"] == 2  # saved just before the act
    sim.advance(sim.clock + ROUND)

    d2 = daemon(tmp_path, sim, table)
    d2.start()
    rounds(d2, sim, 3)
    assert d2.state.round_index == ref.state.round_index == 6
    total = sum(sum(r.values()) for r in received(d2).values())
    assert total == pytest.approx(5 * ROUND * 6)  # every GPU-second credited once
    if after_act:
        # The killed round did act: the restart sees exactly what the reference saw,
        # and learned the same from the jobs' progress (the interval after the act on
        # the placement it acted, the one before on the one before: inflight.py).
        for j, row in received(ref).items():
            assert received(d2)[j] == pytest.approx(row), j
        assert d2.state.plugins.learned_rows.progress == ref.state.plugins.learned_rows.progress
        assert d2.state.plugins.learned_rows.measured == ref.state.plugins.learned_rows.measured
        assert ref.state.plugins.learned_rows.progress  # it did count progress


class ReadingBackend:
    """Delegates to a backend; reads state.json (the pre-act save) and status.json (the
    public view) at each act."""

    def __init__(self, inner, state_dir) -> None:
        self.inner, self.state_dir, self.at_act, self.views = inner, state_dir, [], []

    def observe(self):
        return self.inner.observe()

    def act(self, placement):
        store = StateStore(self.state_dir)
        self.at_act.append(store.load())
        self.views.append(store.load_view())
        return self.inner.act(placement)


def read_each_round(tmp_path, table, n: int, read) -> tuple[ReadingBackend, list]:
    """n rounds of a daemon over a ReadingBackend, and read(its store) after each."""
    sim = cluster(table)
    b = ReadingBackend(sim, tmp_path / "state")
    d = daemon(tmp_path, b, table)
    d.start()
    after = []
    for _ in range(n):
        d.round()
        after.append(read(StateStore(tmp_path / "state")))
        sim.advance(sim.clock + ROUND)
    return b, after


def test_the_pre_act_save_holds_the_state_from_before_the_round(tmp_path, table):
    """The round mutates the state it starts from; the pre-act save (and the rollback)
    must see a copy taken before: the previous round's final save, byte for byte,
    and a restart from it loads the same state."""
    b, finals = read_each_round(tmp_path, table, 4, StateStore.load)
    for before, at_act in zip(finals, b.at_act[1:], strict=False):
        # but the job rows: the inflight record carries the round's own as of its act
        # (what a restart takes), the scheduler's the round before's left out
        rows_before = before["scheduler"]["plugins"].pop("learned_rows")
        assert "learned_rows" not in at_act["scheduler"].get("plugins", {})
        assert json.dumps(at_act["scheduler"]) == json.dumps(before["scheduler"])
        assert at_act["inflight"]["round_index"] == before["scheduler"]["round_index"]
        assert at_act["inflight"]["job_rows"]["jobs"]
        assert at_act["inflight"]["job_rows"] != rows_before  # this round's sightings
    assert finals[-1]["scheduler"] != finals[-2]["scheduler"]  # the rounds did change it


def test_the_pre_act_save_leaves_users_the_last_rounds_view(tmp_path, table):
    """The pre-act save is for a restart: state.json gets the inflight record, while
    status.json (what users read) stays the previous round's end until the round is
    over, which then publishes its own."""
    b, ends = read_each_round(tmp_path, table, 3, StateStore.load_view)
    assert b.views[0] is None  # nothing published before the first round ended
    for end, at_act in zip(ends, b.views[1:], strict=False):
        assert at_act == end  # the last round's view, not a mid-round one
    assert ends[0] != ends[1] != ends[2]  # each round did publish its own


def test_the_pre_act_save_writes_the_published_jobs_view_again(tmp_path, table, monkeypatch):
    """The jobs view is built once per round, by the save that publishes it: the pre-act
    save writes the last published one again (the same as status.json says), instead
    of building its own from the same records (a third of a round's CPU at 5,000
    jobs). The first round's pre-act save, with nothing published yet, builds one."""
    from slurm_gavel.daemon import state_writer

    built = []
    real = state_writer.jobs_view
    monkeypatch.setattr(state_writer, "jobs_view", lambda *a, **k: built.append(1) or real(*a, **k))
    sim = cluster(table)
    b = ReadingBackend(sim, tmp_path / "state")
    d = daemon(tmp_path, b, table)
    d.start()
    published = []
    for _ in range(3):
        d.round()
        published.append(StateStore(tmp_path / "state").load()["jobs"])
        sim.advance(sim.clock + ROUND)
    assert len(built) == 1 + 3  # the first pre-act save, then one per round's end
    for before, at_act in zip(published, b.at_act[1:], strict=False):
        assert at_act["jobs"] == before


def test_each_save_writes_every_jobs_current_row_though_texts_are_kept(tmp_path, table):
    """The saves keep each job's learned row and status record as text between saves
    (state_encode.Fragments): a job whose row or record changed is written as it is
    now, the others from their kept text, and state.json holds exactly the daemon's
    rows and the published records in every round, the pre-act save's inflight record
    the round's rows."""
    from slurm_gavel.core.learned_rows.job_rows_doc import NAME, rows_to_json

    sim = cluster(table)
    b = ReadingBackend(sim, tmp_path / "state")
    d = daemon(tmp_path, b, table)
    d.start()
    saved, changed, reused = [], 0, 0
    for _ in range(6):
        d.round()
        doc = StateStore(tmp_path / "state").load()
        rows = rows_to_json(d.state.plugins.learned_rows)
        assert doc["scheduler"]["plugins"][NAME] == json.loads(json.dumps(rows))
        assert doc["jobs"] == json.loads(json.dumps(d.writer.published_jobs))
        assert b.at_act[-1]["inflight"]["job_rows"]["jobs"].keys() <= rows["jobs"].keys()
        if saved:
            last = saved[-1]["scheduler"]["plugins"][NAME]["jobs"]
            changed += sum(last.get(j) != r for j, r in rows["jobs"].items())
            reused += d.writer.row_texts.reused + d.writer.job_texts.reused
        saved.append(doc)
        sim.advance(sim.clock + ROUND)
    assert changed and reused  # rows did change between saves, and texts were kept


class GcWatchingBackend:
    """Delegates to a backend; records whether the cyclic GC is on at each call."""

    def __init__(self, inner, fail_act: bool = False) -> None:
        self.inner, self.fail_act, self.gc_on = inner, fail_act, []

    def observe(self):
        self.gc_on.append(gc.isenabled())
        return self.inner.observe()

    def act(self, placement):
        self.gc_on.append(gc.isenabled())
        if self.fail_act:
            raise SlurmUnreachable("scontrol: Unable to contact slurm controller")
        return self.inner.act(placement)


@pytest.mark.parametrize("fail_act", [False, True])
def test_the_gc_is_off_during_a_round_and_back_on_after_it(tmp_path, table, fail_act):
    """No collector pass on the round's path (Daemon.round); it is on again after
    the round, also after one that failed, and left off if it was off."""
    b = GcWatchingBackend(cluster(table), fail_act=fail_act)
    d = daemon(tmp_path, b, table)
    d.start()
    assert gc.isenabled()
    d.round_safely()
    assert b.gc_on == [False, False] and gc.isenabled()
    gc.disable()
    try:
        d.round_safely()
        assert not gc.isenabled()
    finally:
        gc.enable()


class FlakyBackend:
    """Observe fails `failures` times (slurmctld down), then works."""

    def __init__(self, inner, failures: int) -> None:
        self.inner, self.failures = inner, failures

    def observe(self):
        if self.failures > 0:
            self.failures -= 1
            raise SlurmUnreachable("squeue: Unable to contact slurm controller")
        return self.inner.observe()

    def act(self, placement):
        return self.inner.act(placement)


def test_unreachable_slurm_backs_off_and_leaves_state_untouched(tmp_path, table):
    sim = cluster(table)
    flaky = FlakyBackend(sim, failures=0)
    d = daemon(tmp_path, flaky, table)
    d.start()
    rounds(d, sim, 2)
    before = json.dumps(d.state.to_json(), sort_keys=True)
    flaky.failures = 4
    waits = []
    for _ in range(4):
        assert not d.round_safely()
        d.loop.consecutive_failures += 1
        waits.append(d.loop.backoff_seconds())
    assert waits == [1, 2, 4, 4]  # doubling, capped at retry_max_seconds
    assert json.dumps(d.state.to_json(), sort_keys=True) == before
    assert 'cause="slurm_unavailable"} 4.0' in d.metrics.exposition()
    sim.advance(sim.clock + ROUND)
    assert d.round_safely()
    assert sum(sum(r.values()) for r in received(d).values()) == pytest.approx(3 * ROUND * 6)


class FailingActBackend(FlakyBackend):
    """Acts, then loses the controller before the act returns (slurmctld restart)."""

    def __init__(self, inner) -> None:
        super().__init__(inner, 0)
        self.fail_next_act = False

    def act(self, placement):
        result = self.inner.act(placement)
        if self.fail_next_act:
            self.fail_next_act = False
            raise SlurmUnreachable("scontrol: Unable to contact slurm controller")
        return result


def test_failure_during_act_is_reconciled_and_the_next_round_only_observes(tmp_path, table):
    ref_sim = cluster(table)
    ref = daemon(tmp_path / "ref", ref_sim, table)
    ref.start()
    rounds(ref, ref_sim, 4)
    sim = cluster(table)
    b = FailingActBackend(sim)
    d = daemon(tmp_path, b, table, clock=lambda: sim.clock)
    d.start()
    rounds(d, sim, 2)
    b.fail_next_act = True
    assert not d.round_safely()  # round 2 acted, then lost slurmctld
    sim.advance(sim.clock + ROUND)
    running_before = dict(sim.running())
    report = d.round()  # round 3: just after the outage, observes only
    assert not report.result.started and not report.result.preempted
    assert dict(sim.running()) == running_before
    # The interrupted round was accounted exactly as the reference accounted it.
    assert d.state.round_index == 4
    for j, row in received(ref).items():
        assert received(d)[j] == pytest.approx(row), j
    sim.advance(sim.clock + ROUND)  # past the settle time
    report = d.round()  # acts again
    assert d.tap.settle_until is None and not report.result.failed
    sim.advance(sim.clock + ROUND)
    d.round()
    assert sum(sum(r.values()) for r in received(d).values()) == pytest.approx(5 * ROUND * 6)


def test_dry_run_prints_the_plan_and_touches_nothing(tmp_path, table):
    sim = cluster(table)

    class NoAct(FlakyBackend):
        def act(self, placement):
            raise AssertionError("dry run must not act")

    out = io.StringIO()
    d = daemon(tmp_path, NoAct(sim, 0), table, dry_run=True, out=out)
    assert d.run(once=True) == 0
    text = out.getvalue()
    assert "dry run, nothing sent to Slurm" in text
    assert text.count("  start    ") == 6
    assert not (tmp_path / "state" / "state.json").exists()
    assert sim.active_count() == 8 and not sim.running()


def test_once_saves_and_second_daemon_is_refused(tmp_path, table):
    sim = cluster(table)
    d = daemon(tmp_path, sim, table)
    d.store.acquire()
    other = daemon(tmp_path, sim, table)
    with pytest.raises(StateLockedError, match="pid"):
        other.run(once=True)
    d.store.release()
    assert other.run(once=True) == 0
    assert StateStore(tmp_path / "state").load()["scheduler"]["round_index"] == 1
    assert not StateStore(tmp_path / "state").daemon_alive()  # released on return


def test_stop_ends_the_loop_after_the_round(tmp_path, table):
    sim = cluster(table)
    d = Daemon(config(tmp_path, round_seconds=30), sim, table=table, metrics=DaemonMetrics())
    codes = []
    t = threading.Thread(target=lambda: codes.append(d.run()))
    t.start()
    while d.last_report is None and t.is_alive():
        t.join(0.01)
    d.stop()
    t.join(10)
    assert codes == [0] and not t.is_alive()
    assert "slurm_gavel_rounds_total 1.0" in d.metrics.exposition()


class UpkeepBackend(FlakyBackend):
    """The simulated cluster with SlurmBackend's between-rounds hook: the first call
    fails (slurmctld away), the third stops the daemon."""

    def __init__(self, inner, daemon_box: list) -> None:
        super().__init__(inner, 0)
        self.calls: list[int] = []  # rounds done at each call
        self.box = daemon_box

    def between_rounds(self) -> None:
        d = self.box[0]
        self.calls.append(d.state.round_index)
        if len(self.calls) == 1:
            raise RuntimeError("squeue: slurmctld not answering")
        if len(self.calls) == 3:
            d.stop()


def test_the_backends_upkeep_runs_between_rounds_and_its_failure_is_only_logged(
    tmp_path, table, caplog
):
    box: list = []
    b = UpkeepBackend(cluster(table), box)
    conf = config(tmp_path, round_seconds=0.05, checkpoint={"grace_seconds": 0.01})
    d = Daemon(conf, b, table=table, metrics=DaemonMetrics())
    box.append(d)
    with caplog.at_level(logging.WARNING):
        assert d.run() == 0
    assert b.calls == [1, 2, 3]  # once after each round, never inside one
    assert sum("between_rounds_failed" in r.getMessage() for r in caplog.records) == 1
    assert d.state.round_index == 3  # the failure stopped no round


class GraceBackend(FlakyBackend):
    """The simulated cluster with SlurmBackend's grace hooks: two preempted jobs' graces
    end 0.1 and 0.15 s into the wait after round 1; enforce_grace fails for the first
    (it is not looked at again), then holds the second."""

    def __init__(self, inner, daemon_box: list) -> None:
        super().__init__(inner, 0)
        self.box = daemon_box
        self.ends: dict[str, float] = {}
        self.calls: list[tuple[int, list[str]]] = []  # (rounds done, jobs due)

    def act(self, placement):
        res = super().act(placement)
        if placement.round_index == 0:
            self.ends = {"7": time.monotonic() + 0.1, "8": time.monotonic() + 0.15}
        return res

    def grace_due_in(self):
        return min(self.ends.values()) - time.monotonic() if self.ends else None

    def enforce_grace(self):
        due = sorted(j for j, t in self.ends.items() if t <= time.monotonic())
        if not self.calls:  # the first call: job 7 only, and Slurm fails
            due = due[:1]
        for j in due:
            del self.ends[j]
        self.calls.append((self.box[0].state.round_index, due))
        if len(self.calls) == 1:
            raise RuntimeError("squeue: slurmctld not answering")
        if len(self.calls) == 2:
            self.box[0].stop()
        return due, {}


def test_a_grace_that_ends_between_rounds_is_enforced_then(tmp_path, table, caplog):
    """The loop wakes when a preempted job's grace ends, not at the next round (3 s
    away here), and asks the backend to requeue-hold what still runs; a failure is
    only logged, and the loop does not spin on it."""
    box: list = []
    b = GraceBackend(cluster(table), box)
    conf = config(tmp_path, round_seconds=3.0, checkpoint={"grace_seconds": 0.01})
    d = Daemon(conf, b, table=table, metrics=DaemonMetrics())
    box.append(d)
    guard = threading.Timer(8.0, d.stop)  # without the hook the loop would run on
    guard.start()
    with caplog.at_level(logging.INFO):
        assert d.run() == 0
    guard.cancel()
    # both after the first round and before the second (due 3 s after the first)
    assert b.calls == [(1, ["7"]), (1, ["8"])]
    events = [(r.getMessage(), getattr(r, "fields", {})) for r in caplog.records]
    assert sum(name == "grace_check_failed" for name, _ in events) == 1
    assert [f for name, f in events if name == "requeue_held_after_grace"] == [{"jobs": "8"}]


class SiteNames(FlakyBackend):
    """The simulated cluster as a site that calls its V100s "tesla_v100" in Slurm."""

    def __init__(self, inner) -> None:
        super().__init__(inner, 0)
        self.acted_types: set[str] = set()

    def observe(self):
        return to_table_names(self.inner.observe(), {"v100": "tesla_v100"})

    def act(self, placement):
        self.acted_types |= {p.gpu_type for p in placement.jobs.values()}
        # the site's own names back to the simulator's (the reverse of observe's)
        return self.inner.act(to_slurm_names(placement, {"v100": "tesla_v100"}))


def test_gpu_type_names_are_mapped_both_ways(tmp_path, table):
    sim = cluster(table)
    site = SiteNames(sim)
    cfg = config(tmp_path, gpu_types={"tesla_v100": "v100"})
    d = Daemon(cfg, site, table=table, metrics=DaemonMetrics())
    d.start()
    report = d.round()
    assert not report.skipped and not report.result.failed
    assert "tesla_v100" in site.acted_types and "v100" not in site.acted_types
    assert {p.gpu_type for p in sim.running().values()} >= {"v100"}
    assert "v100" in d.tap.last_snapshot.capacity()


# The progress spool (reports, their checks, the learned table, its persistence) is
# tested in tests/daemon/test_daemon_progress.py.


def test_steps_of_silent_jobs_are_estimated_from_time_received(table):
    from slurm_gavel.daemon.progress_learning import estimate_steps
    from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, ObservedJob

    jt = "ResNet-50 (batch size 64)"
    row = table.row(jt, 1)
    snap = ClusterSnapshot(0.0, (), (
        ObservedJob(Job("1", jt, total_steps=1e9), JobState.HELD, restarts=2),
        ObservedJob(Job("2", jt, total_steps=10.0), JobState.HELD),
        ObservedJob(Job("3", jt), JobState.HELD, steps_done=7.0),
        ObservedJob(Job("4", "no such type"), JobState.HELD),
    ))  # fmt: skip
    got = {o.job.id: o.steps_done for o in estimate_steps(
        snap, {"1": {"v100": 100.0, "k80": 50.0}, "2": {"v100": 100.0}, "3": {"v100": 1.0},
               "4": {"v100": 1.0}},
        {"1": 2}, table, preemption_overhead_seconds=10.0,
    ).jobs}  # fmt: skip
    expected = 100 * row["v100"] + 50 * row["k80"] - 2 * 10 * max(row.values())
    assert got["1"] == pytest.approx(expected)
    assert got["2"] == 10.0  # never more than the job's total
    assert got["3"] == 7.0  # a reported count wins
    assert got["4"] is None


def test_an_outage_the_backend_rode_out_still_makes_the_daemon_settle(tmp_path, table):
    sim = cluster(table)
    retried = [False]

    def take() -> bool:
        seen, retried[0] = retried[0], False
        return seen

    d = Daemon(config(tmp_path), sim, table=table, metrics=DaemonMetrics(),
               clock=lambda: sim.clock, retried_unreachable=take)  # fmt: skip
    d.start()
    rounds(d, sim, 2)
    retried[0] = True  # the next observe needed retries: slurmctld was away
    before = dict(sim.running())
    report = d.round()
    assert not report.result.started and not report.result.preempted
    assert dict(sim.running()) == before
    # what the owners read of it (the status file, as `status` reads it, no daemon)
    waiting = [j for j in status_view(d.store.load())["jobs"] if j["state"] == "held"]
    assert waiting and all("is settling after a Slurm outage" in j["why"] for j in waiting)
    sim.advance(sim.clock + 25)  # past SETTLE_AFTER_OUTAGE_S
    report = d.round()
    assert not report.result.failed and d.tap.settle_until is None


def test_retry_watch_reports_each_retry_once(monkeypatch):
    from slurm_gavel.commands.run import RetryWatch

    monkeypatch.setattr("time.sleep", lambda s: None)
    w = RetryWatch()
    assert not w.take()
    w.sleep(0.5)
    assert w.take() and not w.take()


class Findings(FlakyBackend):
    """A backend whose observation carries findings (as SlurmBackend.warnings)."""

    def __init__(self, inner) -> None:
        super().__init__(inner, 0)
        self.warnings: list[str] = []


def test_backend_warnings_are_logged_once_while_they_last(tmp_path, table):
    sim = cluster(table)
    backend = Findings(sim)
    d = daemon(tmp_path, backend, table)
    d.start()
    bad = "job 7: gavel comment: unknown key 'gpus'; write gavel:type=... (left to Slurm)"
    backend.warnings = [bad]
    try:
        with daemon_records(logging.WARNING) as records:
            rounds(d, sim, 3)
            backend.warnings = []
            rounds(d, sim, 1)
            backend.warnings = [bad]  # back again: logged again
            rounds(d, sim, 1)
    finally:
        d.store.release()
    logged = [r for r in records if getattr(r, "event", None) == "slurm_warning"]
    assert len(logged) == 2
    assert all(r.fields == {"warning": bad} for r in logged)


def test_daemon_decides_what_the_simulator_decides_from_the_same_state(tmp_path, table):
    # The demo's set-up (8 one-GPU jobs of 4 types on v100:1x2,p100:1x2,k80:1x2, 30 s
    # rounds, max-min fairness), with jobs long enough to see rotation, completions and
    # reallocations. The daemon (progress, step estimates, persistence around run_round)
    # must place exactly as the bare scheduler loop the simulator runs: the churn a real
    # daemon shows is the mechanism's, not the daemon's.
    from slurm_gavel.core.learned_rows.job_rows import Knowledge
    from slurm_gavel.core.scheduler import run_round
    from slurm_gavel.core.scheduler_state import SchedulerState
    from slurm_gavel.daemon.scheduler_config import scheduler_config

    r = 30.0
    kinds = [("Recommendation (batch size 2048)", 1600), ("ResNet-50 (batch size 64)", 480),
             ("A3C", 800), ("CycleGAN", 480)]  # fmt: skip
    jobs = [Job(str(i + 1), kinds[i % 4][0], 1, total_steps=kinds[i % 4][1]) for i in range(8)]

    def sim() -> SimulatedCluster:
        return SimulatedCluster(parse_cluster_spec("v100:1x2,p100:1x2,k80:1x2"), jobs, table,
                                preemption_overhead_seconds=5.0)  # fmt: skip

    def decision(rep):
        res = rep.result
        placed = {j: (p.gpu_type, p.nodes) for j, p in rep.placement.jobs.items()}
        moves = (sorted(res.started), sorted(res.kept), sorted(res.moved), sorted(res.preempted))
        return (rep.reallocated, placed, *moves)

    # Both under the daemon's own round config (scheduler_config: LEARNED rows within
    # the trust bounds, its defaults): the bare loop learns what the daemon learns, so
    # a cell that counts a restart's loss counts it on both sides.
    d_config = config(tmp_path, policy="max_min_fairness", round_seconds=r,
                      progress_dir=str(tmp_path / "progress"))  # fmt: skip
    cfg = scheduler_config(d_config, table)
    assert cfg.knowledge is Knowledge.LEARNED and cfg.plugins.learned_rows.bounds is not None
    ref_sim, state = sim(), SchedulerState()
    expected = []
    while not ref_sim.done():
        state, rep = run_round(state, ref_sim, cfg)
        expected.append(decision(rep))
        ref_sim.advance(min(ref_sim.clock + r, ref_sim.last_completion_of_running()))

    d_sim = sim()
    d = Daemon(d_config, d_sim, table=table, metrics=DaemonMetrics())
    (tmp_path / "progress").mkdir()
    d.start()
    got = []
    while not d_sim.done():
        got.append(decision(d.round()))
        d_sim.advance(min(d_sim.clock + r, d_sim.last_completion_of_running()))
    assert got == expected
    assert sum(len(x[4]) for x in got) > 0  # the rounds rotate jobs between types
    # and both learned the same cells from the jobs' progress
    assert (
        state.plugins.learned_rows.cells_measured == d.state.plugins.learned_rows.cells_measured > 0
    )


def test_stay_credit_reaches_the_scheduler(tmp_path, table):
    d = daemon(tmp_path, cluster(table), table)
    assert d.sched_config.plugins.mechanism.stay_credit_seconds == 0.0  # Gavel unless opted in
    cfg = config(tmp_path, stay_credit_seconds=1080)
    d2 = Daemon(cfg, cluster(table), table=table, metrics=DaemonMetrics())
    assert d2.sched_config.plugins.mechanism.stay_credit_seconds == 1080.0


def test_min_reallocation_interval_reaches_the_scheduler(tmp_path, table):
    d = daemon(tmp_path, cluster(table), table)
    assert d.sched_config.settings.min_reallocation_interval_seconds == 0.0
    cfg = config(tmp_path, min_reallocation_interval_seconds=1920)
    d2 = Daemon(cfg, cluster(table), table=table, metrics=DaemonMetrics())
    assert d2.sched_config.settings.min_reallocation_interval_seconds == 1920.0


# ---- hostile inputs: the smaller items -------------------------------------------------------


def events_of(records, name):
    return [r for r in records if getattr(r, "event", None) == name]


def test_min_cost_with_prices_in_the_config_schedules(tmp_path, table):
    # Before: the config had no `prices` key, so min_cost failed every round.
    sim = cluster(table)
    cfg = config(tmp_path, policy="min_cost", prices={"v100": 2.48, "p100": 1.46, "k80": 0.45})
    d = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    d.start()
    try:
        for _ in range(3):
            assert d.round_safely()
            sim.advance(sim.clock + ROUND)
    finally:
        d.store.release()
    assert d.last_report is not None and d.last_report.placement.jobs
    assert "slurm_gavel_round_errors_total{cause" not in d.metrics.exposition()


class FullDisk(StateStore):
    """A state store on a file system with no space left (after `ok` saves)."""

    def __init__(self, state_dir, ok: int) -> None:
        super().__init__(state_dir)
        self.ok = ok

    def _write(self, data: bytes) -> None:
        if self.ok <= 0:
            raise OSError(28, "No space left on device")
        self.ok -= 1
        super()._write(data)


@pytest.mark.parametrize("ok_saves", [0, 1])
def test_a_full_disk_is_a_state_save_failure_not_a_slurm_outage(
    tmp_path, table, ok_saves, daemon_log
):
    """ok_saves 0: the pre-round (inflight) save fails, so nothing is done to Slurm;
    1: the post-round save fails after the act, and the round is still logged."""
    sim = cluster(table)
    store = FullDisk(tmp_path / "state", ok=ok_saves)
    d = Daemon(config(tmp_path), sim, table=table, metrics=DaemonMetrics(), store=store)
    records = daemon_log
    d.start()
    try:
        ok = d.round_safely()
    finally:
        d.store.release()
    failed = events_of(records, "state_save_failed")
    assert len(failed) == 1 and failed[0].levelno == logging.ERROR
    assert "No space left on device" in failed[0].fields["error"]
    assert str(tmp_path / "state" / "state.json") in failed[0].fields["error"]
    assert not events_of(records, "slurm_unavailable")  # before: every OSError was one
    assert not d.tap.outage and d.tap.settle_until is None  # and the next round would settle
    metrics = d.metrics.exposition()
    assert 'slurm_gavel_round_errors_total{cause="state_save"} 1.0' in metrics
    assert 'cause="slurm_unavailable"' not in metrics
    rounds_logged = events_of(records, "round")
    if ok_saves == 0:
        assert not ok and failed[0].fields["acted"] is False
        assert not rounds_logged and not sim.running()  # no act without its inflight record
    else:
        # The round acted: it is logged (jobs started) although its state was not saved.
        assert ok and failed[0].fields["acted"] is True
        assert len(rounds_logged) == 1
        assert rounds_logged[0].fields["started"] == len(sim.running()) > 0
        assert d.state.round_index == 1  # the new state is kept in memory


def test_other_local_os_errors_are_not_slurm_outages(tmp_path, table, daemon_log):
    class BrokenSpool(FlakyBackend):
        def observe(self):
            raise PermissionError(13, "Permission denied", "/var/spool/slurm-gavel/x")

    d = daemon(tmp_path, BrokenSpool(cluster(table), 0), table)
    records = daemon_log
    d.start()
    try:
        assert not d.round_safely()
    finally:
        d.store.release()
    assert not events_of(records, "slurm_unavailable") and not d.tap.outage
    [failed] = events_of(records, "round_failed")
    assert failed.fields["cause"] == "io" and "/var/spool/slurm-gavel/x" in failed.fields["error"]


def test_skipped_jobs_are_forgotten_once_slurm_no_longer_lists_them(tmp_path, table, daemon_log):
    # Before: the daemon kept every (job, reason) ever seen, growing without bound
    # with what users submit.
    # (skipped: bigger than the cluster; a type the table lacks is managed now)
    jobs = [Job(str(i), TYPES[0], 4, total_steps=1e6) for i in range(50)]
    jobs.append(Job("ok", TYPES[0], 1, total_steps=1e9))
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2"), jobs, table)

    class Cancelled(FlakyBackend):  # Slurm after the users cancelled their jobs
        gone: frozenset[str] = frozenset()

        def observe(self):
            snap = self.inner.observe()
            return replace(snap, jobs=tuple(o for o in snap.jobs if o.job.id not in self.gone))

    backend = Cancelled(sim, 0)
    d = daemon(tmp_path, backend, table)
    records = daemon_log
    d.start()
    try:
        rounds(d, sim, 2)
        assert len(d.events.skipped) == 50
        assert len(events_of(records, "job_skipped")) == 50  # once each, not per round
        backend.gone = frozenset(str(i) for i in range(50))
        rounds(d, sim, 2)
    finally:
        d.store.release()
    assert d.events.skipped == set()


# ---- a full state disk ---------------------------------------------------------


class SwitchableDisk(StateStore):
    """A state store whose file system is full while `full` is set."""

    full = False

    def _write(self, data: bytes) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        super()._write(data)


def test_while_the_disk_is_full_the_daemon_does_not_act_and_loses_no_accounting(
    tmp_path, table, daemon_log
):
    """The written-down behaviour (admin guide, 11): no act without the inflight record,
    so while saves fail the cluster is left as it is and the round is retried; each
    failure is counted; once space returns the daemon saves and acts again, and the
    time jobs ran meanwhile is credited (no reset of the fairness accounting)."""
    sim = cluster(table)
    store = SwitchableDisk(tmp_path / "state")
    d = Daemon(config(tmp_path), sim, table=table, metrics=DaemonMetrics(), store=store)
    records = daemon_log
    d.start()
    try:
        for _ in range(3):
            assert d.round_safely()
            sim.advance(sim.clock + ROUND)
        before = received(d)
        placement = dict(sim.running())
        assert d.metrics.exposition().count("slurm_gavel_state_save_failing 0.0") == 1
        store.full = True
        for _ in range(4):
            assert not d.round_safely()
            assert "slurm_gavel_state_save_failing 1.0" in d.metrics.exposition()
            sim.advance(sim.clock + ROUND)
        assert dict(sim.running()) == placement  # nothing was done to the cluster
        store.full = False
        assert d.round_safely()
    finally:
        d.store.release()
    after = received(d)
    for j in placement:  # ran through the pause: credited all of it
        assert sum(after[j].values()) == pytest.approx(sum(before[j].values()) + 5 * ROUND)
    for j in before:
        assert sum(after[j].values()) >= sum(before[j].values())  # nothing reset
    metrics = d.metrics.exposition()
    assert "slurm_gavel_state_save_failures_total 4.0" in metrics
    assert "slurm_gavel_state_save_failing 0.0" in metrics
    failed = events_of(records, "state_save_failed")
    assert [r.fields["failed_saves"] for r in failed] == [1, 2, 3, 4]
    assert all(r.levelno == logging.ERROR and r.fields["acted"] is False for r in failed)
    [recovered] = events_of(records, "state_save_recovered")
    assert recovered.fields["failed_saves"] == 4
    saved = StateStore(tmp_path / "state").load()
    assert saved is not None and saved["inflight"] is None
    assert {
        j: sum(a["received_s"].values()) for j, a in saved["scheduler"]["jobs"].items()
    } == pytest.approx({j: sum(v.values()) for j, v in after.items()})
