"""Progress reports of jobs that share a GPU feed the pair cells, as hostile
input: only a job Slurm shows paired, whose report names that same partner, votes its
steps_per_s (naming none: tests/daemon/test_daemon_progress_pair_windows.py); on
its side of the pair cell, not its alone cell; quorum of users, bounded steps, drift
cap as for single cells; folded cells are marked as estimates."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from slurm_gavel.core import estimate
from slurm_gavel.daemon.pair_cells import PairObservation, estimated_pair_cells, update_pairs
from slurm_gavel.daemon.progress_cells import STEP_FACTOR
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.domain.cluster_model import ClusterSnapshot, JobState, NodeSlice, ObservedJob
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable, pair_note_key, table_from_json
from tests.daemon.test_daemon_progress import ALICE, BOB, MALLORY, NOW, both, problems, put, report

pytestmark = pytest.mark.hostile

A3C, LM = "A3C", "LM"
SIDE = f"{A3C}|1|v100|with|{LM}"


@pytest.fixture
def table() -> ThroughputTable:
    return ThroughputTable(
        alone={(A3C, 1): {"v100": 10.0, "k80": 2.0}, (LM, 1): {"v100": 4.0, "k80": 1.0}},
        pairs={(A3C, LM, 1): {"v100": (6.0, 3.0)}, (A3C, A3C, 1): {"v100": (5.0, 5.0)}},
    )


@pytest.fixture
def events(daemon_log):
    return daemon_log


def job(i: str, uid: int, partner: str | None, jt: str = A3C, gpu: str = "v100") -> ObservedJob:
    j = Job(i, jt, arrival_time=NOW - 3600)
    return ObservedJob(
        j, JobState.RUNNING, gpu, (NodeSlice(f"{gpu}-0", 1),), partner=partner, user_id=uid
    )


def rounds(
    spool: Path,
    t: ProgressTracker,
    jobs: list[ObservedJob],
    rates: dict[str, Any],
    n: int,
    names: dict[str, Any] | None = None,
) -> None:
    """`n` rounds in which each job of `rates` reports that rate, naming the partner
    Slurm shows (or `names[job]` where given: the key left out when it is ...)."""
    t.merge(ClusterSnapshot(NOW - 60, (), tuple(jobs)))  # the daemon makes the folders
    for r in range(n):
        now = NOW + 60 * r
        for o in jobs:
            if o.job.id not in rates:
                continue
            extra: dict[str, Any] = {"partner": o.partner}
            if names is not None and o.job.id in names:
                extra = {} if names[o.job.id] is ... else {"partner": names[o.job.id]}
            doc = report(o.job.id, job_type=o.job.job_type, steps_per_s=rates[o.job.id],
                         updated=now - 1, **extra)  # fmt: skip
            assert o.user_id is not None
            for path in both(spool, o.user_id, f"{o.job.id}.json"):
                put(path, doc, o.user_id)
        t.merge(ClusterSnapshot(now, (), tuple(jobs)))


def two_pairs(uid_a: int = ALICE, uid_b: int = BOB) -> list[ObservedJob]:
    """Two A3C + LM pairs, the A3C jobs of two users."""
    return [job("1", uid_a, "2"), job("2", uid_a, "1", LM),
            job("3", uid_b, "4"), job("4", uid_b, "3", LM)]  # fmt: skip


def test_paired_reports_of_two_users_move_the_pair_side_a_bounded_step_not_the_alone_cell(
    spool, table
):
    t = ProgressTracker(spool, table=table)
    jobs = two_pairs()
    rounds(spool, t, jobs, {"1": 3.0, "3": 3.0}, 1)
    assert set(t.cells) == {SIDE}  # the alone cell A3C|1|v100 gets no vote
    assert t.cells[SIDE].value == pytest.approx(6.0 / STEP_FACTOR)
    rounds(spool, t, jobs, {"1": 3.0, "3": 3.0}, 10)
    assert t.cells[SIDE].value == pytest.approx(3.0)
    assert estimate.update_table(table, t.table_observations()).alone == table.alone
    new = update_pairs(table, t.pair_observations())
    assert new.pairs[(A3C, LM, 1)]["v100"] == pytest.approx((3.0, 3.0))  # LM's side kept
    assert new.pair_is_estimate(A3C, LM, 1, "v100") and new.pair_is_estimate(LM, A3C, 1, "v100")
    assert estimated_pair_cells(new) == [(A3C, LM, 1, "v100")]
    note = new.notes[pair_note_key(A3C, LM, 1, "v100")]
    assert note.startswith("estimate:") and "2 users agreed" in note, note
    # the table file says so, and reads back the same
    again = table_from_json(json.loads(json.dumps(new.to_json())))
    assert estimated_pair_cells(again) == [(A3C, LM, 1, "v100")]
    # kept across a restart (the state file), the pair side apart from the alone cell
    t2 = ProgressTracker(spool, table=table)
    t2.load(json.loads(json.dumps(t.to_json())))
    assert t2.cells[SIDE].value == pytest.approx(3.0) and t2.cells[SIDE].partner_type == LM


def test_one_user_owning_both_pairs_cannot_move_a_pair_cell(spool, table):
    t = ProgressTracker(spool, table=table)
    rounds(spool, t, two_pairs(MALLORY, MALLORY), {"1": 30.0, "3": 30.0}, 5)
    assert update_pairs(table, t.pair_observations()).pairs == table.pairs


@pytest.mark.parametrize(
    "named, slurm_partner",
    [("9", "2"), ("2", None), ("4", "2")],  # a job not sharing; alone; the other pair's
)
def test_a_report_naming_a_partner_slurm_does_not_show_is_refused(
    spool, table, events, named, slurm_partner
):
    t = ProgressTracker(spool, table=table)
    jobs = [job("1", ALICE, slurm_partner), job("2", ALICE, "1", LM),
            job("3", BOB, slurm_partner), job("4", BOB, "3", LM)]  # fmt: skip
    rounds(spool, t, jobs, {"1": 3.0, "3": 3.0}, 3, names={"1": named, "3": named})
    assert not t.cells  # no vote: neither on a pair side nor on the alone cell
    said = problems(events)
    assert any(f"names job '{named}' as its GPU partner; Slurm shows it" in p for p in said), said


@pytest.mark.parametrize(
    "named", [True, 1.5, "../2", "2\n", "x" * 100, {"id": "2"}, ["2"], -1, math.inf]
)
def test_a_partner_that_is_not_a_job_id_refuses_the_report(spool, table, events, named):
    t = ProgressTracker(spool, table=table)
    jobs = two_pairs()
    rounds(spool, t, jobs, {"1": 3.0, "3": 3.0}, 2, names={"1": named, "3": named})
    assert not t.cells
    said = problems(events)
    assert any(("'partner'" in p and "is not a job id" in p) or "not JSON" in p for p in said)


def test_a_report_naming_last_rounds_partner_is_kept_quietly_and_teaches_nothing(
    spool, table, events
):
    """A pair split (one preempted): the other's report names the old partner until the
    job notices; its steps count, its rate (the old pairing's) teaches nothing."""
    t = ProgressTracker(spool, table=table)
    rounds(spool, t, two_pairs(), {"1": 3.0, "3": 3.0}, 1)
    split = [job("1", ALICE, None), job("3", BOB, None)]  # Slurm: both alone now
    t.cells.clear()
    for o, old in zip(split, ("2", "4"), strict=True):
        doc = report(o.job.id, steps_per_s=10.0, updated=NOW - 1, partner=old)
        put(spool / str(o.user_id) / f"{o.job.id}.json", doc, o.user_id or 0)
    merged = t.merge(ClusterSnapshot(NOW, (), tuple(split)))
    assert not t.cells and not problems(events)
    assert {o.job.id: o.steps_done for o in merged.jobs} == {"1": 10, "3": 10}
    t.merge(ClusterSnapshot(NOW + 60, (), tuple(split)))
    assert len(problems(events)) == 2  # a round later it is no longer last round's


def test_a_paired_job_naming_no_partner_has_its_steps_per_s_ignored(spool, table):
    """Its rate may mix time alone and time shared: neither cell learns from it (its
    steps do not move here, so the daemon derives no rate either: pair_windows.py)."""
    t = ProgressTracker(spool, table=table)
    rounds(spool, t, two_pairs(), {"1": 3.0, "3": 3.0}, 3, names={"1": ..., "3": None})
    assert not t.cells


@pytest.mark.parametrize(
    ("rate", "why"),
    [
        (1e6, f"for {A3C} sharing with {LM} on v100"),
        (1e-9, f"for {A3C} sharing with {LM} on v100"),
        (1e12, "is not in 0..1e+07"),  # over any training loop's rate: refused whole
    ],
)
def test_an_absurd_paired_rate_is_refused_and_the_pair_cell_stays(spool, table, events, rate, why):
    t = ProgressTracker(spool, table=table)
    rounds(spool, t, two_pairs(), {"1": rate, "3": rate}, 3)
    assert update_pairs(table, t.pair_observations()).pairs == table.pairs
    assert any(why in p for p in problems(events))


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_paired_rate_refuses_the_report_whole(spool, table, events, text):
    t = ProgressTracker(spool, table=table)
    jobs = two_pairs()
    for o in jobs[::2]:
        doc = json.dumps(report(o.job.id, partner=o.partner, updated=NOW - 1))
        doc = doc.replace('"steps_per_s": 10.0', f'"steps_per_s": {text}')
        put(spool / str(o.user_id) / f"{o.job.id}.json", doc, o.user_id or 0)
    t.merge(ClusterSnapshot(NOW, (), tuple(jobs)))
    assert not t.cells and len(problems(events)) == 2


def test_a_partner_that_does_not_pair_back_or_runs_elsewhere_teaches_nothing(spool, table):
    t = ProgressTracker(spool, table=table)
    odd = [
        job("1", ALICE, "2"),
        job("2", ALICE, "5", LM),  # 2 pairs with another job
        job("3", BOB, "4"),
        job("4", BOB, "3", LM, gpu="k80"),
    ]  # on another GPU type
    rounds(spool, t, odd, {"1": 3.0, "3": 3.0}, 3)
    gone = [job("1", ALICE, "2"), job("3", BOB, "7")]  # partners not in the snapshot
    rounds(spool, t, gone, {"1": 3.0, "3": 3.0}, 3)
    assert not t.cells


def test_pairs_the_table_says_cannot_share_and_made_up_types_learn_nothing(spool, table):
    t = ProgressTracker(spool, table=table)
    k80 = [job("1", ALICE, "2", gpu="k80"), job("2", ALICE, "1", LM, gpu="k80"),
           job("3", BOB, "4", gpu="k80"), job("4", BOB, "3", LM, gpu="k80")]  # fmt: skip
    rounds(spool, t, k80, {"1": 1.0, "3": 1.0}, 3)  # no pair cell on k80
    made_up = [job("1", ALICE, "2", jt="evil"), job("2", ALICE, "1", LM),
               job("3", BOB, "4", jt="evil"), job("4", BOB, "3", LM)]  # fmt: skip
    rounds(spool, t, made_up, {"1": 3.0, "3": 3.0}, 3)
    assert not t.cells


def test_same_type_pairs_learn_both_sides_of_their_cell(spool, table):
    t = ProgressTracker(spool, table=table)
    jobs = [job("1", ALICE, "2"), job("2", BOB, "1")]
    rounds(spool, t, jobs, {"1": 4.0, "2": 4.0}, 5)
    new = update_pairs(table, t.pair_observations())
    assert new.pairs[(A3C, A3C, 1)]["v100"] == pytest.approx((4.0, 4.0))


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0.0, 1e9, 1e-9])
def test_update_pairs_ignores_hostile_observations(table, value):
    obs = [PairObservation(A3C, LM, 1, "v100", value, 2),
           PairObservation("evil", LM, 1, "v100", 3.0, 2),
           PairObservation(A3C, LM, 1, "k80", 1.0, 2)]  # fmt: skip
    assert update_pairs(table, obs).pairs == table.pairs


def test_update_pairs_keeps_within_the_drift_cap_and_a_derived_pair_gets_its_cell(table):
    table.alone[(A3C, 2)] = {"v100": 18.0}
    table.alone[(LM, 2)] = {"v100": 7.0}
    derived = table.pair(A3C, LM, 2, "v100")
    assert derived is not None
    new = update_pairs(table, [PairObservation(A3C, LM, 1, "v100", 60.0 * 9, 2)])
    assert new.pairs[(A3C, LM, 1)]["v100"][0] == pytest.approx(60.0)  # 10x of 6.0
    new = update_pairs(table, [PairObservation(LM, A3C, 2, "v100", derived[1] / 2, 2)])
    assert new.pair(A3C, LM, 2, "v100") == pytest.approx((derived[0], derived[1] / 2))
    assert new.pair_is_estimate(A3C, LM, 2, "v100")
