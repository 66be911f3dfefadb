"""core/moldable/moldable.py: the GPU range grammar and the count chosen at each (re)start."""

from __future__ import annotations

import pytest

from slurm_gavel.core.moldable.moldable import (
    MoldJob,
    ScaleRangeError,
    choose_counts,
    cluster_value,
    format_range,
    parse_range,
    trace_range,
    with_untried,
)

SUBLINEAR = {1: 1.0, 2: 1.8, 4: 3.0, 8: 5.0}  # most per GPU at 1
SUPERLINEAR_2 = {1: 1.0, 2: 3.0, 4: 4.0}  # most per GPU at 2


@pytest.mark.parametrize(("text", "want"), [("2-8", (2, 8)), ("1-1", (1, 1)), ("4", None)])
def test_ranges_parse(text, want):
    assert parse_range(text) == want
    if want is not None:
        assert format_range(want) == text


@pytest.mark.parametrize(
    "text",
    [
        "8-2",
        "0-4",
        "1-",
        "-3",
        "1-2000",
        "01-4",
        "1-8-9",
        " 1-8",
        "1-8 ",
        "a-b",
        "1.5-3",
        "1--8",
        "+1-8",
        "1-0x8",
        "１-8",
        "1-8\n",
        "-",
        "1-99999999999999999999",
    ],
)
def test_hostile_ranges_are_refused_naming_the_form(text):
    with pytest.raises(ScaleRangeError, match=r"MIN-MAX|minimum|at most|e\.g\."):
        parse_range(text)


def test_under_contention_every_waiting_job_takes_its_least_count():
    jobs = [MoldJob("a", SUBLINEAR), MoldJob("b", SUPERLINEAR_2), MoldJob("c", {4: 1.0})]
    assert choose_counts(jobs, 5) == {"a": 1, "b": 1, "c": 4}  # 6 GPUs asked of 5
    assert choose_counts(jobs, 6) == {"a": 1, "b": 1, "c": 4}
    # one GPU idle: b's 1 -> 2 (3x) gains more per GPU than a's (1.8x)
    assert choose_counts(jobs, 7) == {"a": 1, "b": 2, "c": 4}


def test_idle_gpus_go_to_the_largest_normalised_gain_per_gpu():
    # a: 1 -> 2 gains 0.8 per GPU; b: 2 -> 4 gains (4/3 - 1) / 2 = 0.17 per GPU
    jobs = [MoldJob("a", SUBLINEAR), MoldJob("b", SUPERLINEAR_2)]
    assert choose_counts(jobs, 4) == {"a": 2, "b": 2}
    # then a: 2 -> 4 gains 1.2 / 2 = 0.6 per GPU, b's 0.17 comes last
    assert choose_counts(jobs, 6) == {"a": 4, "b": 2}
    assert choose_counts(jobs, 8) == {"a": 4, "b": 4}
    assert choose_counts(jobs, 100) == {"a": 8, "b": 4}  # each at its largest count


def test_a_step_that_does_not_fit_is_skipped_for_one_that_does():
    jobs = [MoldJob("a", {1: 1.0, 8: 7.0}), MoldJob("b", SUBLINEAR)]
    # a's 1 -> 8 is the best gain but needs 7 of the 3 GPUs left
    assert choose_counts(jobs, 5) == {"a": 1, "b": 4}


def test_no_gain_no_growth():
    flat = {1: 1.0, 2: 1.0, 4: 0.9}
    assert choose_counts([MoldJob("a", flat)], 64) == {"a": 1}


def test_a_running_job_keeps_its_count_and_counts_against_the_gpus():
    jobs = [MoldJob("run", SUBLINEAR, fixed=4), MoldJob("wait", SUBLINEAR)]
    assert choose_counts(jobs, 6) == {"run": 4, "wait": 2}
    assert choose_counts(jobs, 3) == {"run": 4, "wait": 1}  # never shrunk


def test_a_running_job_grows_only_when_the_time_saved_pays_its_restart():
    # 1,000 steps: 1,000 s at 1 GPU, 556 s at 2, 200 s at 8; worth 2 x 120 s
    worth = MoldJob("run", SUBLINEAR, fixed=1, steps_left=1000.0, restart_s=120.0)
    assert choose_counts([worth], 8)["run"] == 8
    # the most any step saves is 1,000 - 200 s at 8 GPUs: below 2 x 450 s
    not_worth = MoldJob("run", SUBLINEAR, fixed=1, steps_left=1000.0, restart_s=450.0)
    assert choose_counts([not_worth], 8)["run"] == 1
    unknown = MoldJob("run", SUBLINEAR, fixed=1)  # steps left unknown: never
    assert choose_counts([unknown], 8)["run"] == 1


def test_cluster_value_weights_types_by_their_gpus():
    assert cluster_value({"v100": 4.0, "k80": 1.0}, {"v100": 1, "k80": 3}) == pytest.approx(1.75)
    assert cluster_value({"v100": 4.0}, {"v100": 0}) == 0.0


@pytest.mark.parametrize(
    ("n", "largest", "want"), [(1, 8, (1, 2)), (2, 8, (1, 4)), (4, 8, (2, 8)), (8, 8, (4, 8))]
)
def test_trace_rule_is_half_to_double_within_the_table(n, largest, want):
    assert trace_range(n, largest) == want


@pytest.mark.parametrize(
    ("n", "grow", "shrink", "want"),
    [
        (1, 4, True, (1, 4)),
        (2, 4, True, (1, 8)),
        (4, 4, True, (2, 8)),
        (1, 4, False, (1, 4)),
        (2, 1, True, (1, 2)),
        (2, 1, False, (2, 2)),
    ],
)
def test_trace_rule_grows_up_to_k_times_n(n, grow, shrink, want):
    assert trace_range(n, 8, shrink, grow) == want


def test_untried_counts_are_valued_a_hair_above_the_largest_known():
    got = with_untried({1: 10.0, 2: 19.0}, 4)
    assert set(got) == {1, 2, 3, 4} and got[1] == 10.0 and got[2] == 19.0
    assert 19.0 < got[3] < got[4] < 19.0 * 1.001
    assert with_untried({1: 10.0}, 1) == {1: 10.0}  # nothing above: unchanged
    assert with_untried({1: 0.0}, 4) == {1: 0.0}  # nothing to grow from


def test_untried_counts_take_only_the_gpus_every_known_gain_left_idle():
    a = MoldJob("a", with_untried({1: 10.0}, 4))  # a row at 1 GPU only (A3C)
    b = MoldJob("b", {1: 10.0, 2: 19.0, 4: 30.0})
    assert choose_counts([a, b], 5) == {"a": 1, "b": 4}  # b's known gains first
    assert choose_counts([a, b], 7) == {"a": 3, "b": 4}  # then a, into what is left
    assert choose_counts([a, b], 8) == {"a": 4, "b": 4}
    assert choose_counts([a, MoldJob("c", {2: 5.0}, fixed=2)], 6) == {"a": 4, "c": 2}
