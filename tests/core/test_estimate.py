"""Estimates for unmeasured throughput cells (low-rank completion) and online updates."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from slurm_gavel.core.estimate import (
    MAX_DRIFT,
    Observation,
    complete_matrix,
    estimate_missing,
    is_estimate,
    update_table,
)
from slurm_gavel.domain.throughputs import ThroughputTable, load_table


def test_complete_matrix_recovers_an_exact_low_rank_matrix() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=8), rng.normal(size=4)
    u, v = rng.normal(size=8), rng.normal(size=4)
    truth = 1.0 + a[:, None] + b[None, :] + np.outer(u, v)
    obs = truth.copy()
    missing = [(0, 1), (3, 3), (6, 0)]
    for i, k in missing:
        obs[i, k] = np.nan
    filled = complete_matrix(obs, rank=1, reg=1e-6, iters=2000)
    for i, k in missing:
        assert filled[i, k] == pytest.approx(truth[i, k], abs=0.05)
    assert np.array_equal(filled[~np.isnan(obs)], obs[~np.isnan(obs)])  # measured kept


def _held_out_errors(rank: int, seed: int = 0) -> list[float]:
    """Hide random cells of the published table, estimate them, |log(est/true)|."""
    table, rng, errs = load_table(), np.random.default_rng(seed), []
    for gpu in table.gpu_types:
        for _ in range(4):
            t = copy.deepcopy(table)
            held = {
                jt: t.alone[(jt, 1)].pop(gpu)
                for jt, sf in table.alone
                if sf == 1 and rng.random() < 0.5
            }
            est, cells = estimate_missing(t, rank=rank)
            assert {(jt, 1, gpu) for jt in held} <= set(cells)
            errs += [abs(math.log(est.alone[(jt, 1)][gpu] / v)) for jt, v in held.items() if v > 0]
    return errs


def test_held_out_published_cells_are_estimated_well_and_better_than_biases_only() -> None:
    rank1, rank0 = _held_out_errors(1), _held_out_errors(0)
    # Measured on Gavel's published V100/P100/K80 table: median |log error| ~0.19 for
    # rank 1 (about 20%), ~0.31 for the per-job x per-GPU scaling alone.
    assert float(np.median(rank1)) < 0.3
    assert float(np.median(rank1)) < float(np.median(rank0))


def _small() -> ThroughputTable:
    t = ThroughputTable(
        alone={
            ("a", 1): {"v100": 10.0, "k80": 2.0, "cpu": 0.5},
            ("b", 1): {"v100": 4.0, "k80": 2.0, "cpu": 0.8},
            ("c", 1): {"v100": 8.0, "k80": 0.0},
            ("d", 1): {"v100": 6.0},
        }
    )
    return t


def test_missing_cells_are_estimated_and_marked_zero_cells_are_kept() -> None:
    t = _small()
    est, cells = estimate_missing(t)
    assert set(cells) == {("c", 1, "cpu"), ("d", 1, "k80"), ("d", 1, "cpu")}
    assert est.alone[("c", 1)]["k80"] == 0.0  # "cannot run" is a fact
    for jt, sf, g in cells:
        assert est.alone[(jt, sf)][g] > 0 and is_estimate(est, jt, sf, g)
    assert not is_estimate(est, "a", 1, "cpu")
    assert "cpu" not in t.alone[("c", 1)]  # the input is not modified


def test_update_replaces_estimates_and_smooths_measurements() -> None:
    est, _ = estimate_missing(_small())
    before_c_cpu = est.alone[("c", 1)]["cpu"]
    obs = [
        Observation("d", 1, "cpu", 0.3),
        Observation("d", 1, "cpu", 0.5),
        Observation("a", 1, "v100", 20.0),
    ]
    new = update_table(est, obs, smoothing=0.5)
    assert new.alone[("d", 1)]["cpu"] == pytest.approx(0.4)
    assert not is_estimate(new, "d", 1, "cpu") and "observed" in new.note("d", 1, "cpu")
    assert new.alone[("a", 1)]["v100"] == pytest.approx(15.0)  # halfway to 20
    assert is_estimate(new, "c", 1, "cpu")  # re-estimated with the new data
    assert new.alone[("c", 1)]["cpu"] != before_c_cpu
    assert est.alone[("d", 1)]["cpu"] != 0.4 and est.alone[("a", 1)]["v100"] == 10.0  # pure
    assert update_table(est, []).alone == est.alone


def test_observation_from_a_progress_report() -> None:
    rep = {
        "format": "slurm-gavel-progress/1",
        "job_type": "A3C",
        "steps_per_s": 2.5,
        "run_steps": 3000,
    }
    ob = Observation.from_report(rep, "v100", 1)
    assert ob == Observation("A3C", 1, "v100", 2.5, 3.0)
    assert Observation.from_report({**rep, "steps_per_s": None}, "v100", 1) is None
    assert Observation.from_report({**rep, "job_type": None}, "v100", 1) is None


# ---- hostile observations (reports are written by users) -------------------------


@pytest.mark.hostile
def test_update_ignores_hostile_observations_and_adds_no_made_up_rows() -> None:
    t = ThroughputTable(alone={("a", 1): {"v100": 10.0, "k80": 0.0}})
    hostile = [
        Observation("a", 1, "v100", math.nan),
        Observation("a", 1, "v100", math.inf),
        Observation("a", 1, "v100", -5.0),
        Observation("a", 1, "v100", 0.0),
        Observation("a", 1, "v100", 1e308),  # more than 100x off: no measurement
        Observation("a", 1, "v100", 1e-300),
        Observation("a", 1, "k80", 3.0),  # 0 = cannot run there: a fact, not data
        Observation("made-up", 1, "v100", 3.0),  # no such job type: no new row
        Observation("a", 8, "v100", 3.0),  # no such scale factor either
    ]
    new = update_table(t, hostile)
    assert new.alone == t.alone and new.notes == {}


@pytest.mark.hostile
def test_update_stays_finite_and_within_the_drift_cap_whatever_the_weights() -> None:
    t = ThroughputTable(alone={("a", 1): {"v100": 10.0, "k80": 2.0}})
    obs = [
        Observation("a", 1, "v100", 900.0, weight=math.inf),
        Observation("a", 1, "v100", 11.0, weight=math.nan),
        Observation("a", 1, "v100", 11.0, weight=1e308),
        Observation("a", 1, "h100", 30.0, weight=1e308),  # a GPU type new to the table
    ]
    new = update_table(t, obs, smoothing=1.0)
    row = new.alone[("a", 1)]
    assert all(math.isfinite(v) for v in row.values())
    assert row["v100"] == pytest.approx(11.0)  # the weighted median, not the 900 outlier
    reference = math.sqrt(10.0 * 2.0)  # the row's type-blind value for a new GPU type
    assert row["h100"] == pytest.approx(30.0) and row["h100"] <= reference * MAX_DRIFT
    too_far = update_table(t, [Observation("a", 1, "v100", 500.0)], smoothing=1.0)
    assert too_far.alone[("a", 1)]["v100"] == pytest.approx(10.0 * MAX_DRIFT)


@pytest.mark.hostile
def test_observation_from_a_hostile_report_is_none_or_bounded() -> None:
    rep = {"job_type": "A3C", "steps_per_s": 2.5, "run_steps": 3000}
    for bad in (math.nan, math.inf, -1.0, True, "2.5"):
        assert Observation.from_report({**rep, "steps_per_s": bad}, "v100", 1) is None
    assert Observation.from_report({**rep, "job_type": ["A3C"]}, "v100", 1) is None
    for run_steps in (math.inf, math.nan, 1e308, "x"):
        ob = Observation.from_report({**rep, "run_steps": run_steps}, "v100", 1)
        assert ob is not None and 1.0 <= ob.weight <= 1e6
