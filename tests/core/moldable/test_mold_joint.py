"""The joint count choice for the round (core/moldable/mold_joint.py): running jobs never shrink
and grow only when the restart pays; the LP is not solved again for the same input."""

from __future__ import annotations

import pytest

from slurm_gavel.core.moldable import mold_joint
from slurm_gavel.core.moldable.mold_joint import JointMemo, choose_joint, request_norm
from slurm_gavel.core.moldable.moldable import MoldJob

ROWS = {1: {"v100": 1.0}, 2: {"v100": 3.0}}  # superlinear: 2 GPUs 3x one
CAP = {"v100": 2}


def _choose(job: MoldJob, memo: JointMemo | None = None) -> int:
    return choose_joint([job], {"j": ROWS}, {"j": 1}, {"j": 1.0}, CAP, memo).counts["j"]


def test_a_waiting_job_takes_the_count_the_lp_gives_it_time_at() -> None:
    assert _choose(MoldJob("j", {1: 1.0, 2: 3.0})) == 2


def test_a_running_job_grows_only_when_the_time_saved_pays_its_restart() -> None:
    # at 1 steps/s, 3 at 2 GPUs: 30 steps left save 20 s
    pays = MoldJob("j", {1: 1.0, 2: 3.0}, fixed=1, steps_left=30.0, restart_s=10.0)
    assert _choose(pays) == 2
    costly = MoldJob("j", {1: 1.0, 2: 3.0}, fixed=1, steps_left=30.0, restart_s=11.0)
    assert _choose(costly) == 1


def test_a_running_job_never_shrinks() -> None:
    sub = {1: {"v100": 1.0}, 2: {"v100": 1.2}}
    jobs = [MoldJob("a", {1: 1.0, 2: 1.2}, fixed=2), MoldJob("b", {1: 1.0, 2: 1.2})]
    got = choose_joint(jobs, {"a": sub, "b": sub}, {"a": 2, "b": 2}, {"a": 1.0, "b": 1.0}, CAP)
    assert got.counts == {"a": 2, "b": 1}
    assert got.types == {}  # a running job keeps its place; b is at its least count


def test_the_same_input_is_not_solved_again(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = JointMemo()
    job = MoldJob("j", {1: 1.0, 2: 3.0})
    assert _choose(job, memo) == 2
    monkeypatch.setattr(mold_joint, "allocate_counts", lambda *a: pytest.fail("solved again"))
    assert _choose(job, memo) == 2


def test_the_norm_without_a_row_at_the_request_scales_the_nearest_count() -> None:
    assert request_norm({2: {"v100": 3.0}}, 4, CAP) == pytest.approx(6.0)
    assert request_norm({1: {"v100": 1.0}, 2: {"v100": 3.0}}, 2, CAP) == pytest.approx(3.0)
    assert request_norm({}, 2, CAP) == 1.0


def test_a_job_grown_past_its_least_count_runs_only_where_the_lp_gave_it_that_count() -> None:
    # LM-like: 2 GPUs are 2x one V100 but slower than one P100 (Gavel's LM rows)
    rows = {1: {"v100": 80.0, "p100": 77.0}, 2: {"v100": 160.0, "p100": 72.0}}
    job = MoldJob("lm", {1: 78.5, 2: 116.0})
    got = choose_joint([job], {"lm": rows}, {"lm": 1}, {"lm": 1.0}, {"v100": 2, "p100": 2})
    assert got.counts == {"lm": 2}
    assert got.types == {"lm": frozenset({"v100"})}
