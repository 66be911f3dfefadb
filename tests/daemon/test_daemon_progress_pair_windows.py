"""Paired jobs that do not name their partner (real jobs): the daemon derives the paired
rate from two of a job's reports inside a window in which it saw the pair together
every round (slurm_gavel/daemon/pair_windows.py), as one vote with the usual hardening. Every
field of the report is the user's: each test is a way to forge or break the window."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from slurm_gavel.daemon.pair_cells import update_pairs
from slurm_gavel.daemon.pair_windows import MIN_WINDOW_S
from slurm_gavel.daemon.progress_cells import STEP_FACTOR
from slurm_gavel.daemon.progress_learning import ProgressTracker
from slurm_gavel.domain.cluster_model import ClusterSnapshot, ObservedJob
from tests.daemon.test_daemon_progress import ALICE, BOB, MALLORY, NOW, problems, put, report
from tests.daemon.test_daemon_progress_pairs import A3C, LM, SIDE, job, table, two_pairs

pytestmark = pytest.mark.hostile
__all__ = ["table"]  # fixtures

ROUND_S = 20.0  # rounds this far apart: a window of MIN_WINDOW_S spans two of them
RATE = 3.0  # what the A3C jobs really do while paired (the table says 6.0)
Doc = dict[str, Any]


@pytest.fixture
def events(daemon_log):
    return daemon_log


def at(r: int) -> float:
    return NOW + ROUND_S * r


def honest(i: str, r: int, rate: float = RATE, start: float = 100.0) -> Doc:
    """Job i's report read at round r, as the job library writes it: no partner, a
    steps_per_s mixing alone and shared time (the alone rate: must not be used)."""
    updated = at(r) - 1
    steps = start + rate * (updated - NOW)
    return report(i, steps=steps, run_steps=steps, steps_per_s=10.0, updated=updated,
                  partner=None)  # fmt: skip


def play(
    spool,
    t: ProgressTracker,
    rounds: range,
    jobs: Callable[[int], list[ObservedJob]] | list[ObservedJob],
    doc: Callable[[str, int], Doc | str] = honest,
    reporters: tuple[str, ...] = ("1", "3"),
) -> list[float | None]:
    """Rounds in which `reporters` report (doc(job, round)) and the tracker merges the
    snapshot jobs(round); the pair side's value after each round (None: no cell)."""
    values: list[float | None] = []
    for r in rounds:
        seen = jobs(r) if callable(jobs) else jobs
        for o in seen:
            if o.job.id in reporters:
                assert o.user_id is not None
                put(spool / str(o.user_id) / f"{o.job.id}.json", doc(o.job.id, r), o.user_id)
        t.merge(ClusterSnapshot(at(r), (), tuple(seen)))
        values.append(t.cells[SIDE].value if SIDE in t.cells else None)
    return values


def test_two_users_unnamed_reports_move_the_pair_side_once_the_window_is_long_enough(
    spool, table, events
):
    t = ProgressTracker(spool, table=table)
    values = play(spool, t, range(12), two_pairs())
    # Round 0 first sees the pair (its report predates it), round 1 starts the window,
    # round 3 is the first 40 s >= MIN_WINDOW_S later.
    assert 2 * ROUND_S >= MIN_WINDOW_S > ROUND_S
    assert values[:3] == [None, None, None], values
    assert values[3] == pytest.approx(6.0 / STEP_FACTOR)
    assert values[-1] == pytest.approx(RATE)
    assert set(t.cells) == {SIDE}  # the alone cell took no vote from the 10.0 steps_per_s
    assert {v.uid for v in t.cells[SIDE].votes.values()} == {ALICE, BOB}
    merged = t.merge(ClusterSnapshot(at(12), (), tuple(two_pairs())))
    assert {o.job.id: o.measured_throughput for o in merged.jobs}["1"] == pytest.approx(RATE)
    new = update_pairs(table, t.pair_observations())
    assert new.pairs[(A3C, LM, 1)]["v100"] == pytest.approx((RATE, 3.0))
    assert new.pair_is_estimate(A3C, LM, 1, "v100")
    assert not problems(events)


def test_one_user_owning_both_pairs_cannot_move_the_cell(spool, table):
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: honest(i, r, rate=60.0)  # noqa: E731
    assert set(play(spool, t, range(12), two_pairs(MALLORY, MALLORY), doc)) == {None, 6.0}
    assert len(t.cells[SIDE].votes) == 2  # both jobs voted: one user, no quorum


def test_rewinding_steps_never_makes_a_window(spool, table, events):
    """Steps going down each report (a user hoping for a negative or huge rate)."""
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: honest(i, r, rate=-RATE, start=1e6)  # noqa: E731
    play(spool, t, range(12), two_pairs(), doc)
    assert not t.cells and not problems(events)


def test_a_rewind_mid_window_restarts_the_window(spool, table):
    """Steps fall back once at round 3 (what a window over it would call a slow rate):
    the window starts again there and votes 40 s later, at the true rate."""
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: honest(i, r, start=100.0 if r < 3 else -100.0)  # noqa: E731
    values = play(spool, t, range(6), two_pairs(), doc)
    assert values == [None] * 5 + [pytest.approx(6.0 / STEP_FACTOR)], values
    assert {j: v.rate for j, v in t.cells[SIDE].votes.items()} == pytest.approx(
        {"1": RATE, "3": RATE}
    )


def test_jumping_steps_are_over_the_bound_and_refused(spool, table, events):
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: honest(i, r, start=100.0 if r < 3 else 1e12)  # noqa: E731
    play(spool, t, range(8), two_pairs(), doc)
    assert update_pairs(table, t.pair_observations()).pairs == table.pairs
    said = problems(events)
    assert any(f"off the table's 6 for {A3C} sharing with {LM} on v100" in p for p in said), said


@pytest.mark.parametrize("ahead_s", [60.0, 1e6])
def test_an_updated_in_the_future_is_no_end_of_a_window(spool, table, ahead_s):
    """Within the clock skew allowed (60 s) the report is kept but ends no window (the
    pair is not seen together then yet); beyond it the report is refused."""
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: {**honest(i, r), "updated": at(r) + ahead_s}  # noqa: E731
    play(spool, t, range(10), two_pairs(), doc)
    assert not t.cells


def test_updated_going_backwards_never_makes_a_window(spool, table):
    """Each report older than the last, steps growing: a window would be negative."""
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: {**honest(i, 9 - r), "steps": 100.0 + r * 60}  # noqa: E731
    play(spool, t, range(10), two_pairs(), doc)
    assert not t.cells


@pytest.mark.parametrize(
    "field, text",
    [
        ("steps", "NaN"),
        ("steps", "Infinity"),
        ("steps", "1e400"),
        ("updated", "NaN"),
        ("updated", "1e400"),
        ("run_steps", "1e400"),
        ("run_steps", "-Infinity"),
    ],
)
def test_non_finite_steps_or_times_make_no_window(spool, table, field, text):
    t = ProgressTracker(spool, table=table)

    def doc(i: str, r: int) -> str:
        d = honest(i, r)
        d[field] = "@@"
        return json.dumps(d).replace('"@@"', text)

    play(spool, t, range(12), two_pairs(), doc)
    assert not t.cells


def test_run_steps_not_moving_with_steps_make_no_window(spool, table):
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: {**honest(i, r), "run_steps": 5}  # noqa: E731
    play(spool, t, range(10), two_pairs(), doc)
    assert not t.cells


@pytest.mark.parametrize("who", ["the job", "its partner"])
def test_a_restart_in_the_window_restarts_it(spool, table, who):
    """Requeued at round 3 and back on the same GPU with the same partner: the runs
    changed, so the window starts again (it would have voted at round 3)."""
    t = ProgressTracker(spool, table=table)
    moved = {"the job": ("1", "3"), "its partner": ("2", "4")}[who]

    def jobs(r: int) -> list[ObservedJob]:
        return [replace(o, restarts=1) if r >= 3 and o.job.id in moved else o
                for o in two_pairs()]  # fmt: skip

    def doc(i: str, r: int) -> Doc:
        d = honest(i, r)
        if r >= 3 and who == "the job":  # the new run's report: run_steps from 0
            d.update(restart_count=1, run_steps=RATE * (at(r) - at(3)))
        return d

    values = play(spool, t, range(7), jobs, doc)
    assert values[:6] == [None] * 6, values
    assert values[6] == pytest.approx(6.0 / STEP_FACTOR)


def test_a_report_keeping_the_old_restart_count_after_a_restart_teaches_nothing(spool, table):
    t = ProgressTracker(spool, table=table)
    play(spool, t, range(10), [replace(o, restarts=1) for o in two_pairs()])
    assert not t.cells


def test_a_pair_that_split_and_formed_again_within_the_window_restarts_it(spool, table):
    """Apart at round 3 only (one round): a window from round 1 to 4 would vote at 4."""
    t = ProgressTracker(spool, table=table)

    def jobs(r: int) -> list[ObservedJob]:
        if r == 3:
            return [job("1", ALICE, None), job("2", ALICE, None, LM),
                    job("3", BOB, None), job("4", BOB, None, LM)]  # fmt: skip
        return two_pairs()

    values = play(spool, t, range(8), jobs)
    assert values[:7] == [None] * 7, values
    assert values[7] == pytest.approx(6.0 / STEP_FACTOR)


@pytest.mark.parametrize(
    "partner_of",
    [
        {"1": "9", "3": "9"},  # Slurm shows a partner that is not a managed job
        {"2": "5", "4": "5"},  # the partner pairs with another job
    ],
)
def test_a_partner_not_managed_or_not_pairing_back_teaches_nothing(spool, table, partner_of):
    t = ProgressTracker(spool, table=table)
    jobs = [replace(o, partner=partner_of.get(o.job.id, o.partner)) for o in two_pairs()]
    play(spool, t, range(10), jobs)
    assert not t.cells


def test_a_partner_on_other_gpus_teaches_nothing(spool, table):
    t = ProgressTracker(spool, table=table)
    jobs = [job("1", ALICE, "2"), job("2", ALICE, "1", LM, gpu="k80"),
            job("3", BOB, "4"), job("4", BOB, "3", LM, gpu="k80")]  # fmt: skip
    play(spool, t, range(10), jobs)
    assert not t.cells


def test_a_report_naming_its_partner_keeps_using_its_steps_per_s(spool, table):
    """Naming the partner is the cleaner window (the library restarts it at each
    change): its steps_per_s votes at once, not steps over a daemon-seen window."""
    t = ProgressTracker(spool, table=table)
    doc = lambda i, r: {**honest(i, r), "partner": {"1": "2", "3": "4"}[i],  # noqa: E731
                        "steps_per_s": 4.0}  # fmt: skip
    values = play(spool, t, range(12), two_pairs(), doc)
    assert values[0] == pytest.approx(6.0 / STEP_FACTOR)
    assert values[-1] == pytest.approx(4.0)
