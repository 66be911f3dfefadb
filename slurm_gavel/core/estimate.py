"""Throughput estimates for (job type, GPU type) cells never measured, and online updates.

Gavel fills unmeasured cells of its throughput matrix by low-rank matrix completion over
reference jobs (as Paleo/Quasar do). This is a small version of that: for each scale
factor, a matrix with one row per job type and one column per GPU type, in log space
(speed-ups are ratios, and throughputs span three orders of magnitude), fitted as

    log T[j, t] ~ mu + a[j] + b[t] + u[j] . v[t]        (rank r, ridge-regularised)

by alternating least squares over the measured cells only. With r = 0 this is "the job
is as much faster on t as the typical job"; r >= 1 lets families differ (a ResNet gains
more from a V100 than a recommender does). Cells with 0 (cannot run) are facts, not
data for the fit, and are never estimated over.

Estimated cells get a note starting with ``estimate:``; a later measurement (profiler)
or observation (:func:`update_table`) replaces the value and the note.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from slurm_gavel.domain.model import GpuType
from slurm_gavel.domain.throughputs import ThroughputTable

ESTIMATE_PREFIX = "estimate:"


def is_estimate(table: ThroughputTable, job_type: str, scale_factor: int, gpu: GpuType) -> bool:
    note = table.note(job_type, scale_factor, gpu)
    return note is not None and note.startswith(ESTIMATE_PREFIX)


def complete_matrix(
    observed: np.ndarray, *, rank: int = 1, reg: float = 0.1, iters: int = 200, seed: int = 0
) -> np.ndarray:
    """Fill NaN entries of a (rows x cols) log-throughput matrix; observed entries are kept.

    Alternating ridge regressions of biases and factors on the observed entries.
    """
    mask = ~np.isnan(observed)
    if not mask.any():
        raise ValueError("complete_matrix: no observed entries")
    n, m = observed.shape
    y = np.where(mask, observed, 0.0)
    mu = float(y[mask].mean())
    a, b = np.zeros(n), np.zeros(m)
    rng = np.random.default_rng(seed)
    u = rng.normal(scale=0.1, size=(n, rank))
    v = rng.normal(scale=0.1, size=(m, rank))
    for _ in range(iters):
        # biases: closed form per row/column given everything else
        r = np.where(mask, y - mu - b[None, :] - u @ v.T, 0.0)
        a = r.sum(1) / (mask.sum(1) + reg)
        r = np.where(mask, y - mu - a[:, None] - u @ v.T, 0.0)
        b = r.sum(0) / (mask.sum(0) + reg)
        resid = np.where(mask, y - mu - a[:, None] - b[None, :], 0.0)
        eye = reg * np.eye(rank)
        for i in range(n):
            cols = mask[i]
            if cols.any():
                vi = v[cols]
                u[i] = np.linalg.solve(vi.T @ vi + eye, vi.T @ resid[i, cols])
        for k in range(m):
            rows = mask[:, k]
            if rows.any():
                uk = u[rows]
                v[k] = np.linalg.solve(uk.T @ uk + eye, uk.T @ resid[rows, k])
    full = mu + a[:, None] + b[None, :] + u @ v.T
    return np.where(mask, observed, full)


def estimate_missing(
    table: ThroughputTable,
    gpu_types: Iterable[GpuType] | None = None,
    *,
    rank: int = 1,
    reg: float = 0.1,
    only_estimated: bool = False,
) -> tuple[ThroughputTable, list[tuple[str, int, GpuType]]]:
    """A copy of the table with missing (job type, scale factor, GPU) cells estimated
    (those of ``gpu_types``, default every GPU type; the fit always uses all columns).

    A missing cell otherwise means "cannot run there" (conf/THROUGHPUTS.md), so this is
    an explicit step (``slurm-gavel profile --estimate``). Only measured cells (no
    ``estimate:`` note, value > 0) feed the fit; cells already estimated are
    re-estimated; with ``only_estimated`` nothing else is added. Returns (new table,
    estimated cells).
    """
    out = copy.deepcopy(table)
    gpus = out.gpu_types  # the fit uses every column; only ``gpu_types`` are filled
    fill = set(gpus if gpu_types is None else gpu_types)
    estimated: list[tuple[str, int, GpuType]] = []
    for sf in sorted({sf for _, sf in out.alone}):
        rows = [jt for jt, s in out.alone if s == sf]
        obs = np.full((len(rows), len(gpus)), np.nan)
        for i, jt in enumerate(rows):
            row = out.alone[(jt, sf)]
            for k, g in enumerate(gpus):
                if g in row and row[g] > 0 and not is_estimate(out, jt, sf, g):
                    obs[i, k] = math.log(row[g])
        todo = [
            (i, k)
            for i, jt in enumerate(rows)
            for k, g in enumerate(gpus)
            if g in fill
            and (
                is_estimate(out, jt, sf, g) or (g not in out.alone[(jt, sf)] and not only_estimated)
            )
            and not np.isnan(obs[i]).all()  # a row with no measurement has nothing to go on
            and not np.isnan(obs[:, k]).all()  # nor a GPU type nothing was measured on
        ]
        if not todo:
            continue
        rank_here = min(rank, max(0, min(obs.shape) - 1))
        filled = complete_matrix(obs, rank=rank_here, reg=reg)
        n_obs = int((~np.isnan(obs)).sum())
        for i, k in todo:
            jt, g = rows[i], gpus[k]
            out.alone[(jt, sf)][g] = float(math.exp(filled[i, k]))
            out.set_note(
                jt,
                sf,
                g,
                f"{ESTIMATE_PREFIX} low-rank completion (rank {rank_here}) from {n_obs} "
                f"measured cells at scale factor {sf}; measure with `slurm-gavel profile`",
            )
            estimated.append((jt, sf, g))
    return out, estimated


def estimate_by_scaling(
    table: ThroughputTable, gpu_types: Iterable[GpuType]
) -> tuple[ThroughputTable, list[tuple[str, int, GpuType]]]:
    """A copy of ``table`` with the multi-GPU cells of ``gpu_types`` still missing
    estimated from the same job type's scale-factor-1 cell on that GPU type, times how
    the job scales on the other types: the geometric mean of T[sf]/T[1] over the types
    with figures at both sizes. For a GPU type profiled on a one-GPU machine (only
    scale factor 1 measured), where the per-size fit of :func:`estimate_missing` has
    nothing to go on. Needs the scale-factor-1 cell (measured or estimated); notes say
    it is an estimate and from what."""
    out = copy.deepcopy(table)
    estimated: list[tuple[str, int, GpuType]] = []
    for (jt, sf), row in out.alone.items():
        one = out.alone.get((jt, 1), {})
        if sf == 1 or not one:
            continue
        ratios = [
            math.log(row[t] / one[t])
            for t in row
            if row[t] > 0 and one.get(t, 0.0) > 0 and not is_estimate(out, jt, sf, t)
            and not is_estimate(out, jt, 1, t)
        ]  # fmt: skip
        for g in gpu_types:
            if g in row or one.get(g, 0.0) <= 0 or not ratios:
                continue
            scaling = math.exp(sum(ratios) / len(ratios))
            row[g] = one[g] * scaling
            out.set_note(
                jt,
                sf,
                g,
                f"{ESTIMATE_PREFIX} its scale factor 1 figure on {g} times its scaling to "
                f"{sf} GPUs on {len(ratios)} other type(s) ({scaling:.2f}x); measure with "
                "`slurm-gavel profile`",
            )
            estimated.append((jt, sf, g))
    return out, estimated


# Observations come from users' jobs: a value further than ABSURD_FACTOR
# from the cell is no measurement, and no observation moves a cell beyond MAX_DRIFT
# of the table it is folded into (re-profile with `slurm-gavel profile` for more).
ABSURD_FACTOR = 100.0
MAX_DRIFT = 10.0
MAX_WEIGHT = 1e6


def _finite_positive(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) and f > 0 else None


@dataclass(frozen=True)
class Observation:
    """A running job's measured throughput (from its progress report)."""

    job_type: str
    scale_factor: int
    gpu_type: GpuType
    steps_per_s: float
    weight: float = 1.0  # e.g. how many steps the rate was measured over, in thousands

    @classmethod
    def from_report(cls, report: dict, gpu_type: GpuType, scale_factor: int) -> Observation | None:
        """From a slurm-gavel-progress/1 report (None when it has no type or a usable
        rate: missing, zero, negative, NaN or infinite)."""
        rate, jt = _finite_positive(report.get("steps_per_s")), report.get("job_type")
        if not jt or not isinstance(jt, str) or rate is None:
            return None
        run_steps = _finite_positive(report.get("run_steps")) or 1.0
        weight = min(MAX_WEIGHT, max(1.0, run_steps / 1000.0))
        return cls(jt, scale_factor, gpu_type, rate, weight)


def cell_reference(
    table: ThroughputTable, job_type: str, scale_factor: int, gpu: GpuType
) -> float | None:
    """The value observations of a cell are bounded around, or None: ignore them.

    The cell's value when it has one > 0. A cell the row lacks (a GPU type new to the
    table: GPU types come from Slurm, never from a user) is bounded around the row's
    type-blind value, the geometric mean of its figures (cluster_rows.py uses the same).
    None for a row the table lacks (a made-up job type or scale factor), a cell that
    says "cannot run there" (0), or a row with no usable figure.
    """
    row = table.alone.get((job_type, scale_factor))
    if row is None:
        return None
    if gpu in row:
        return _finite_positive(row[gpu])
    logs = [math.log(v) for v in row.values() if _finite_positive(v) is not None]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _weighted_median(values: list[tuple[float, float]]) -> float:
    """The median of (value, weight) pairs: one heavy outlier cannot drag it far."""
    values = sorted(values)
    half = sum(w for _, w in values) / 2
    acc = 0.0
    for i, (v, w) in enumerate(values):
        acc += w
        if acc > half:
            return v
        if acc == half:  # an exact split (even count, equal weights): the middle
            return (v + values[i + 1][0]) / 2 if i + 1 < len(values) else v
    return values[-1][0]


def update_table(
    table: ThroughputTable,
    observations: Iterable[Observation],
    *,
    smoothing: float = 0.3,
    rank: int = 1,
) -> ThroughputTable:
    """A new table with the observations folded in (pure; the daemon calls it each round).

    Observations are hostile input. Ignored: those of a job type or scale
    factor the table lacks (no made-up rows), of a cell that says "cannot run there",
    values that are not finite and > 0 or more than ABSURD_FACTOR from the cell's
    :func:`cell_reference`; weights are capped at MAX_WEIGHT.

    * An estimated or missing cell (a GPU type new to the table) takes the observed
      value (weighted median of its observations) and stops being an estimate.
    * A measured cell moves toward the observations by ``smoothing`` (an exponential
      moving average: one noisy job does not rewrite a careful measurement).
    * No cell ends further than MAX_DRIFT from its reference in ``table``.
    * Cells still estimated are then re-estimated with the new data.
    """
    out = copy.deepcopy(table)
    grouped: dict[tuple[str, int, GpuType], list[tuple[float, float]]] = {}
    refs: dict[tuple[str, int, GpuType], float] = {}
    for ob in observations:
        key = (ob.job_type, ob.scale_factor, ob.gpu_type)
        ref = cell_reference(table, *key)
        rate = _finite_positive(ob.steps_per_s)
        if ref is None or rate is None or not ref / ABSURD_FACTOR <= rate <= ref * ABSURD_FACTOR:
            continue
        refs[key] = ref
        weight = min(MAX_WEIGHT, _finite_positive(ob.weight) or 1.0)
        grouped.setdefault(key, []).append((rate, weight))
    if not grouped:
        return out
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    for (jt, sf, g), obs in grouped.items():
        observed = _weighted_median(obs)
        row = out.alone[(jt, sf)]
        ref = refs[(jt, sf, g)]
        measured = g in row and not is_estimate(out, jt, sf, g)
        value = (1 - smoothing) * row[g] + smoothing * observed if measured else observed
        row[g] = min(max(value, ref / MAX_DRIFT), ref * MAX_DRIFT)
        out.set_note(jt, sf, g, f"observed from {len(obs)} running job report(s), {stamp}")
    if any(n.startswith(ESTIMATE_PREFIX) for n in out.notes.values()):
        out, _ = estimate_missing(out, rank=rank, only_estimated=True)
    return out
