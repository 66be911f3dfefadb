"""The daemon learns each job's own throughput row: a job of no named type
is managed from submission, its row replaces its prior cell by cell within the trust
bounds, survives a restart, and `status`/`explain` show it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from test_daemon import (
    ROUND,
    FlakyBackend,
    KillingBackend,
    cluster,
    config,
    events_of,
    killed_in_its_third_round,
    received,
    rounds,
    started,
)

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.commands.explain import format_explain
from slurm_gavel.commands.status import format_status
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.inflight import Inflight
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.daemon.status_view import status_view
from slurm_gavel.domain.cluster_model import JobState
from slurm_gavel.domain.comment_grammar import UNTYPED
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table


@pytest.fixture(scope="module")
def table():
    return load_table()


TRUE = {"a": {"v100": 40.0, "k80": 4.0}, "b": {"v100": 4.0, "k80": 4.4}}


def _sim(table) -> SimulatedCluster:
    jobs = [Job(j, UNTYPED, 1, total_steps=1e9) for j in TRUE]
    return SimulatedCluster(parse_cluster_spec("v100:1x1,k80:1x1"), jobs, table, true_rows=TRUE)


def _daemon(tmp_path, sim, table, **learning) -> Daemon:
    cfg = config(tmp_path)
    if learning:
        from slurm_gavel.daemon.config_learning import learning_config

        section, rows = learning_config(learning, "learning")
        cfg = replace(cfg, learning=section, plugins=replace(cfg.plugins, learned_rows=rows))
    return Daemon(cfg, sim, table=table, metrics=DaemonMetrics())


def test_untyped_jobs_are_managed_and_learn_their_rows(tmp_path, table):
    sim = _sim(table)
    d = _daemon(tmp_path, sim, table)
    with started(d):
        rounds(d, sim, 12)
        assert not d.last_report.skipped  # managed from submission, no type needed
        measured = d.state.plugins.learned_rows.measured
        # each job ran on both types (the policy's rotation) and measured its own cells
        for j, row in TRUE.items():
            for t, v in row.items():
                got = measured[j].get(t)
                if got is not None:
                    assert got.steps_per_s == v and got.seconds > 0
        assert {t for j in measured for t in measured[j]} == {"v100", "k80"}
        view = status_view(d.store.load(), None)
    jobs = {j["id"]: j for j in view["jobs"]}
    cells = jobs["a"]["throughput"]
    assert {c["backed_by"] for c in cells.values()} <= {"measured", "estimate"}
    assert any(c["backed_by"] == "measured" and c["seconds"] > 0 for c in cells.values())
    text = format_status(view, now=view["saved_at"])
    assert "each job's throughput row" in text and "a (no type):" in text
    assert "(none)" in text  # the JOBTYPE column of a job submitted without a type
    explained = format_explain(jobs["a"], view)
    assert "(no job type) on 1 GPU(s)" in explained and "measured" in explained
    # a restart keeps what was learned
    d2 = _daemon(tmp_path, sim, table)
    with started(d2):
        assert d2.state.plugins.learned_rows.measured == measured


def test_placement_follows_the_learned_rows(tmp_path, table):
    # Both jobs start on the same estimate (the typical job: faster on a V100), so the
    # allocation time-shares both types; once each has reported from both types, job a
    # (10x on a V100) keeps the V100 and job b (faster on the K80) the K80. Without the
    # reallocation on a job's first report from a type, the first allocation stays in
    # force as long as no job arrives or ends: they swap every other round forever.
    sim = _sim(table)
    d = _daemon(tmp_path, sim, table)
    with started(d):
        seen = []
        for _ in range(16):
            d.round()
            seen.append({j: p.gpu_type for j, p in d.state.placement.items()})
            sim.advance(sim.clock + ROUND)
    assert {"a": "k80", "b": "v100"} in seen[:3]  # the prior's rotation at first
    assert all(p == {"a": "v100", "b": "k80"} for p in seen[-8:]), seen


class Claiming:
    """The simulated cluster, with one job's reported rate on one type multiplied."""

    def __init__(self, inner: SimulatedCluster, job: str, gpu: str, factor: float) -> None:
        self.inner, self.job, self.gpu, self.factor = inner, job, gpu, factor

    def observe(self):
        snap = self.inner.observe()
        jobs = tuple(
            replace(o, measured_throughput=o.measured_throughput * self.factor)
            if o.job.id == self.job and o.gpu_type == self.gpu and o.measured_throughput
            else o
            for o in snap.jobs
        )
        return replace(snap, jobs=jobs)

    def act(self, placement):
        return self.inner.act(placement)


@pytest.mark.hostile
def test_a_claim_beyond_the_jobs_progress_is_held_to_it(tmp_path, table, daemon_log):
    # job c runs at 1 step/s on both types but claims 40 on a V100: its cell stays
    # within what its steps show (1 step/s; up to 30 s of a 60 s round allowed for
    # start-up, which is what each restart costs here)
    far = {"c": {"v100": 1.0, "k80": 1.0}, "d": {"v100": 1.0, "k80": 1.0}}
    jobs = [Job(j, UNTYPED, 1, total_steps=1e9) for j in far]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x1,k80:1x1"), jobs, table, true_rows=far)
    d = _daemon(tmp_path, Claiming(sim, "c", "v100", 40.0), table)
    with started(d):
        rounds(d, sim, 8)
    rows = d.state.plugins.learned_rows
    got = {t: m.steps_per_s for t, m in rows.measured["c"].items()}
    assert set(got) == {"v100", "k80"} and rows.bounded > 0
    assert 1.0 <= got["v100"] <= ROUND / (ROUND - 30.0)
    assert got["k80"] == 1.0  # the honest cell as reported
    # the admin hears of it, once per job and figure, not every round
    said = [r.fields for r in events_of(daemon_log, "job_row_bounded")]  # type: ignore[attr-defined]
    assert said and {r["job"] for r in said} == {"c"}
    assert len(said) == len({(r["gpu_type"], r["reported_steps_per_s"]) for r in said})


def test_a_true_row_far_from_its_prior_is_learned_as_its_progress_shows(tmp_path, table):
    # job c truly is 40x faster on a K80 than on a V100, against a prior that says a
    # V100 is the faster one: its steps show it, so the ratio bound does not hold it
    far = {"c": {"v100": 1.0, "k80": 40.0}, "d": {"v100": 1.0, "k80": 1.0}}
    jobs = [Job(j, UNTYPED, 1, total_steps=1e9) for j in far]
    sim = SimulatedCluster(parse_cluster_spec("v100:1x1,k80:1x1"), jobs, table, true_rows=far)
    d = _daemon(tmp_path, sim, table)
    with started(d):
        rounds(d, sim, 8)
    got = {t: m.steps_per_s for t, m in d.state.plugins.learned_rows.measured["c"].items()}
    assert got == far["c"]


def test_a_job_that_reports_nothing_stays_on_its_prior_and_is_marked_so(tmp_path, table):
    sim = _sim(table)

    class Silent(FlakyBackend):  # jobs that never report their progress: no steps, no rate
        def observe(self):
            snap = self.inner.observe()
            quiet = tuple(
                o
                if o.state is JobState.DONE
                else replace(o, measured_throughput=None, steps_done=None)
                for o in snap.jobs
            )
            return replace(snap, jobs=quiet)

    d = _daemon(tmp_path, Silent(sim, 0), table)
    with started(d):
        rounds(d, sim, 6)
        assert d.state.plugins.learned_rows.measured == {}
        view = status_view(d.store.load(), None)
    for job in view["jobs"]:
        assert all(c["backed_by"] != "measured" for c in job["throughput"].values())
    assert "(no reports yet: on its prior)" in format_status(view, now=view["saved_at"])


def test_a_job_that_reports_its_steps_but_no_rate_is_measured_from_them(tmp_path, table):
    sim = _sim(table)

    class NoRate(FlakyBackend):
        def observe(self):
            snap = self.inner.observe()
            quiet = tuple(replace(o, measured_throughput=None) for o in snap.jobs)
            return replace(snap, jobs=quiet)

    d = _daemon(tmp_path, NoRate(sim, 0), table)
    with started(d):
        rounds(d, sim, 6)
    # each measured cell within its progress range, so within a restart's 30 s of a
    # 60 s round of the truth
    rows = d.state.plugins.learned_rows.measured
    assert set(rows) == set(TRUE)
    for j, cells in rows.items():
        for t, m in cells.items():
            assert TRUE[j][t] * 0.5 <= m.steps_per_s <= TRUE[j][t] * 2.0


def test_table_knowledge_gives_untyped_jobs_back(tmp_path, table):
    sim = _sim(table)
    d = _daemon(tmp_path, sim, table, knowledge="table")
    with started(d):
        d.round()
        assert {j for j, _ in d.last_report.skipped} == set(TRUE)


# ---- the progress behind the cells across a restart -----------------------------------


def _learned(d: Daemon):
    rows = d.state.plugins.learned_rows
    return rows.progress, rows.measured, received(d)


def test_a_restarted_daemon_goes_on_from_the_progress_it_saved(tmp_path, table):
    # Stopped between rounds and started again, it learns what an uninterrupted one
    # does: the progress behind each cell and each job's last sighting are in the state.
    ref_sim = cluster(table)
    ref = _daemon(tmp_path / "ref", ref_sim, table)
    ref.start()
    rounds(ref, ref_sim, 7)
    assert ref.state.plugins.learned_rows.progress and ref.state.plugins.learned_rows.measured
    sim = cluster(table)
    d = _daemon(tmp_path, sim, table)
    d.start()
    rounds(d, sim, 4)
    d.store.release()
    d2 = _daemon(tmp_path, sim, table)
    d2.start()
    assert d2.state.plugins.learned_rows.last_seen == d.state.plugins.learned_rows.last_seen
    rounds(d2, sim, 3)
    d2.store.release()
    ref.store.release()
    assert _learned(d2) == _learned(ref)


def _killed_after_its_act(tmp_path, table):
    """A daemon killed right after its third act; the state file and the cluster."""
    sim = cluster(table)
    d = _daemon(tmp_path, KillingBackend(sim, kill_at=3, after_act=True), table)
    killed_in_its_third_round(d, sim)
    sim.advance(sim.clock + ROUND)
    return tmp_path / "state" / "state.json", sim


def _edit(path, change) -> dict:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))  # NaN and the like written as Python writes them
    return doc


def _old_record(doc: dict) -> None:
    # as an older daemon saved it: the rows in the scheduler state, none in the record
    doc["scheduler"]["job_rows"] = doc["inflight"].pop("job_rows")
    doc["scheduler"].get("plugins", {}).pop("learned_rows", None)


def _garbage(doc: dict) -> None:
    doc["inflight"]["job_rows"] = "garbage"


def _hostile_cells(doc: dict) -> None:
    for job in doc["inflight"]["job_rows"]["jobs"].values():
        for cell in job.get("progress", {}).values():
            cell[0] = math.nan
        if "last_seen" in job:
            job["last_seen"]["restarts"] = -5


@pytest.mark.hostile
@pytest.mark.parametrize("change", [_old_record, _garbage, _hostile_cells])
def test_an_old_or_hostile_inflight_record_still_resumes(tmp_path, table, change):
    # An inflight record from before it carried the round's rows, or one whose rows are
    # not the daemon's (edited, corrupted): the restart resumes, its accounting whole,
    # and no untrusted figure reaches a job's progress.
    path, sim = _killed_after_its_act(tmp_path, table)
    doc = _edit(path, change)
    assert doc["inflight"]["round_index"] == 2
    d2 = _daemon(tmp_path, sim, table)
    d2.start()
    if change is _old_record:
        assert d2.state.plugins.learned_rows.last_seen  # read from the scheduler state, as before
    rounds(d2, sim, 3)
    d2.store.release()
    assert d2.state.round_index == 6
    total = sum(sum(r.values()) for r in received(d2).values())
    assert total == pytest.approx(5 * ROUND * 6)  # every GPU-second credited once
    for cells in d2.state.plugins.learned_rows.progress.values():
        for p in cells.values():
            assert math.isfinite(p.steps) and p.steps >= 0 and p.seconds > 0
    assert all(s.restarts >= 0 for s in d2.state.plugins.learned_rows.last_seen.values())


def test_the_time_after_a_killed_act_runs_on_the_placement_it_acted(tmp_path, table):
    # What Slurm shows running where the killed round placed it is that round's
    # placement (as it decided it, consolidated or not), not the one before it.
    sim = cluster(table)
    d = _daemon(tmp_path, sim, table)
    with started(d):
        rounds(d, sim, 2)
        before = dict(d.state.placement)
        assert before
        acted = {j: replace(p, consolidated=False) for j, p in before.items()}
        d._inflight = Inflight(d.state.round_index, sim.clock, acted, None)
        d._needs_reconcile = True
        d.reconcile(sim.observe())
    assert d.state.placement == acted
