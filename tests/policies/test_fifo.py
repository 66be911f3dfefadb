"""fifo and fifo_agnostic: arrival order, whole GPUs of one type, head-of-line blocking,
the type choice of each, skipped jobs, feasibility (checked against a brute-force
replay of the queue)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_gavel.domain.model import Problem, ProblemJob
from slurm_gavel.policies import allocate
from slurm_gavel.policies.fifo_agnostic import preferred


def job(i, tput, since, sf=1) -> ProblemJob:
    return ProblemJob(str(i), "t", tput, sf, 1.0, time_since_start=since)


PINNED_CHOICES = ["p", "k", "v", "v", "p", "v"]  # preferred() of j0..j5 over v, p, k


def placed(alloc) -> dict[str, str]:
    out = {}
    for jid, row in alloc.fractions.items():
        on = [t for t, x in row.items() if x > 0]
        assert len(on) <= 1 and all(row[t] == 1.0 for t in on)  # whole GPUs, one type
        if on:
            out[jid] = on[0]
    return out


def test_fifo_takes_jobs_in_arrival_order_on_their_fastest_type():
    # 2 v and 2 k GPUs; the job that arrived first (largest time_since_start) goes first.
    p = Problem(
        {"v": 2, "k": 2},
        (
            job("late", {"v": 3.0, "k": 1.0}, since=10.0),
            job("early", {"v": 3.0, "k": 1.0}, since=500.0, sf=2),
            job("mid", {"v": 1.0, "k": 2.0}, since=100.0),
        ),
    )
    got = placed(allocate(p, "fifo"))
    assert got == {"early": "v", "mid": "k", "late": "k"}  # v is full when "late" comes


def test_queue_stops_at_the_first_job_without_room():
    # "big" arrived second and needs 2 GPUs of a type; only 1 v and 1 k are left, so
    # the queue stops there and "small" (arrived last) does not jump ahead.
    p = Problem(
        {"v": 2, "k": 1},
        (
            job("first", {"v": 1.0, "k": 1.0}, since=300.0),
            job("big", {"v": 1.0, "k": 1.0}, since=200.0, sf=2),
            job("small", {"v": 1.0, "k": 1.0}, since=100.0),
        ),
    )
    for name in ("fifo", "fifo_agnostic"):
        a = allocate(p, name)
        assert set(placed(a)) == {"first"}
        assert any("stops at job big" in n for n in a.notes)


def test_job_that_can_never_run_does_not_block_the_queue():
    p = Problem(
        {"v": 1},
        (job("nowhere", {"v": 0.0}, since=900.0), job("ok", {"v": 1.0}, since=1.0)),
    )
    a = allocate(p, "fifo")
    assert placed(a) == {"ok": "v"}
    assert any("skipped: nowhere" in n for n in a.notes)


def test_agnostic_ignores_speed():
    # Same jobs, speeds turned around: the agnostic choice does not move, the aware one does.
    def jobs(tput):
        return tuple(job(i, tput, since=10.0 - i) for i in range(12))

    fast_v = Problem({"k": 12, "v": 12}, jobs({"v": 9.0, "k": 1.0}))
    fast_k = Problem({"k": 12, "v": 12}, jobs({"v": 1.0, "k": 9.0}))
    assert placed(allocate(fast_v, "fifo_agnostic")) == placed(allocate(fast_k, "fifo_agnostic"))
    assert set(placed(allocate(fast_v, "fifo")).values()) == {"v"}
    assert set(placed(allocate(fast_k, "fifo")).values()) == {"k"}


def test_agnostic_spreads_jobs_over_types_by_capacity_not_by_listing_order():
    # Room everywhere: each job's first choice. Taking the first listed type (as this
    # policy once did) put every job on v, the fastest type in the usual listing.
    cluster = {"v": 1000, "p": 2000, "k": 3000}
    p = Problem(cluster, tuple(job(f"job-{i}", {"v": 3.0, "p": 2.0, "k": 1.0}, 0.0)
                               for i in range(3000)))  # fmt: skip
    counts = Counter(placed(allocate(p, "fifo_agnostic")).values())
    for t, cap in cluster.items():
        assert counts[t] / 3000 == pytest.approx(cap / 6000, abs=0.03)


def test_agnostic_choice_is_fixed_per_job_and_independent_of_the_listing_order():
    jobs = tuple(job(f"j{i}", {"v": 1.0, "p": 1.0, "k": 1.0}, since=50.0 - i) for i in range(30))
    a = placed(allocate(Problem({"v": 4, "p": 4, "k": 4}, jobs), "fifo_agnostic"))
    b = placed(allocate(Problem({"k": 4, "p": 4, "v": 4}, jobs), "fifo_agnostic"))
    assert a == b and len(a) == 12
    # The draws come from a hash without process salt: these ids always prefer these
    # types (a changed hash would reshuffle every running job at the next upgrade).
    assert [preferred(j, ["v", "p", "k"], {"v": 4, "p": 4, "k": 4}) for j in jobs[:6]] == (
        PINNED_CHOICES
    )
    # A job keeps its type while it has room, whatever jobs behind it in the queue do.
    fewer = placed(allocate(Problem({"v": 4, "p": 4, "k": 4}, jobs[:5]), "fifo_agnostic"))
    assert all(a[j] == t for j, t in fewer.items())


def test_agnostic_takes_its_next_choice_when_its_first_is_full():
    p = Problem({"v": 1, "k": 1}, (job("a", {"v": 1.0, "k": 1.0}, 9.0),
                                   job("b", {"v": 1.0, "k": 1.0}, 1.0)))  # fmt: skip
    got = placed(allocate(p, "fifo_agnostic"))
    assert sorted(got.values()) == ["k", "v"]  # both placed, one per type


def test_ties_in_arrival_keep_problem_order_and_ties_in_speed_the_cluster_order():
    p = Problem({"v": 1, "k": 1}, (job("a", {"v": 1.0, "k": 1.0}, 0.0), job("b", {"v": 1.0}, 0.0)))
    assert placed(allocate(p, "fifo")) == {"a": "v"}  # b then finds v taken: stop


def replay(p: Problem, fastest: bool) -> dict[str, str]:
    """The queue, written out naively: every step rescans all types."""
    free = dict(p.cluster)
    out = {}
    for j in sorted(p.jobs, key=lambda j: -j.time_since_start):
        ok = [t for t in p.cluster if j.throughput.get(t, 0) > 0 and j.scale_factor <= p.cluster[t]]
        if not ok:
            continue
        room = [t for t in ok if free[t] >= j.scale_factor]
        if not room:
            break
        best = room[0] if fastest else preferred(j, room, p.cluster)
        if fastest:
            for t in room:
                if j.throughput[t] > j.throughput[best]:
                    best = t
        out[j.id] = best
        free[best] -= j.scale_factor
    return out


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    types = ["v", "p", "k"][: draw(st.integers(1, 3))]
    cluster = {t: draw(st.integers(0, 6)) for t in types}
    n = draw(st.integers(1, 10))
    jobs = tuple(
        ProblemJob(
            str(i),
            "t",
            {t: draw(st.sampled_from([0.0, 1.0, 2.0, 3.0])) for t in types},
            draw(st.sampled_from([1, 1, 2, 4])),
            1.0,
            time_since_start=float(draw(st.integers(0, 5))),
        )
        for i in range(n)
    )
    return Problem(cluster, jobs)


@settings(max_examples=80, deadline=None)
@given(problems())
def test_property_feasible_and_equal_to_replay(p):
    for name, fastest in (("fifo", True), ("fifo_agnostic", False)):
        a = allocate(p, name)
        assert a.violations(p) == []
        assert placed(a) == replay(p, fastest)
        assert a.objective == pytest.approx(len(placed(a)))
