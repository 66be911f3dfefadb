"""Moldable at (re)start: the GPU count a job with a range runs at.

A job may give a range of GPU counts, [min, max] (a trace's ``scale_factor`` column
``MIN-MAX``; on Slurm the comment's ``scale=MIN-MAX``). Its count is chosen each time it
is (re)started and never changes while it runs: on Slurm every start of a held job is an
update of its request anyway, so choosing the count again costs nothing beyond the
restart the mechanism decided. The choice, for the jobs that wait this round, given the
counts the running jobs hold (:func:`choose_counts`):

1. **Least first.** Each waiting job starts at the smallest count of its range that
   has a throughput row: under contention the policy shares the GPUs among more jobs
   and a job never holds more than it said it can do with. (Starting at the count with
   the most steps/s per GPU was tried and measured worse on every Philly window,
   EXPERIMENTS.md: the count is chosen before the LP picks the type, and Gavel's table
   is superlinear on V100 only for several models, so a count efficient on average
   often lands on a type where it is not.)
2. **Grow into idle GPUs.** If the chosen counts and the running jobs' counts together
   ask for fewer GPUs than the cluster has, the rest is handed out greedily: each step
   moves one job to a larger count, the step with the largest normalised gain per
   added GPU, ``(value(c') - value(c)) / value(c0) / (c' - c)``, where c0 is its count of
   step 1, so that a 10 % speed-up of one job weighs as much as of any other (steps of
   different models are not comparable; Gavel's max-min normalises the same way). Only
   steps with a positive gain that fit in the GPUs left are taken: Pollux's and Sia's
   goodput per GPU, given to idle GPUs only.
   Under learned rows with ``moldable_untried`` (the daemon's default), a waiting job
   may also grow past the largest count it has a row for (the table's, or its own
   reports at that count), up to its range's maximum: each such *untried* count is
   valued a hair above that largest one (:func:`with_untried`, ``UNTRIED_GAIN``), so
   it takes only the GPUs that every known gain left idle. Without it a job whose type
   the table has at one count only (A3C, CycleGAN, every job of no known type) ran at
   its least count on an idle cluster for ever: nothing says a larger count is faster,
   and nothing can until it runs at one (its progress reports there then replace the
   guess with a measured row). Not under the table's rows alone (a count without a row
   cannot be scheduled there), nor in the simulator (its jobs have no true rate at a
   count the table lacks). Never for a running job: a restart is not spent on a guess.
3. **A running job grows only if it pays.** A running job keeps its count, except that
   it may take such a step too when the time the larger count saves on its remaining
   steps, ``steps_left * (1/value(c) - 1/value(c'))``, is at least RESTART_WORTH times
   its restart cost: the count change is a restart (on Slurm a requeue), priced like
   any move. Without it a job started small under contention would run on small long
   after the cluster emptied (on the Philly window a 2-GPU LM job ran at 1 GPU for
   390 h while the cluster was idle). A running job never shrinks: it is preempted by
   the mechanism as any job is, and comes back at the count chosen then.

The policy's LP then allocates with these counts as rigid scale factors, and the
mechanism places them: the allocation over GPU type and count is a greedy count choice
on top of the rigid LP (docs/design.md says why not one LP over (job, type, count)).

``value(c)`` is what one run of the job at count c achieves on the cluster: its row at
that count (steps/s per GPU type) averaged over the cluster's GPUs, each type weighted
by its GPU count. Rows come from the table's scale-factor rows (the prior), replaced by
what the job measured at that count (mold_round.py).

Pure functions over plain data; deterministic (ties break on the job id).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_gavel.domain.model import GpuType, JobId
from slurm_gavel.errors import InputError

# The largest count a range may name (the comment grammar's largest scale).
MAX_COUNT = 1024
_RANGE = re.compile(r"([1-9][0-9]{0,3})-([1-9][0-9]{0,3})", re.ASCII)

# A running job grows (a restart) only when that saves this many times its restart cost.
RESTART_WORTH = 2.0
# An untried count's value over the largest known one's, per GPU above it (2.): a gain
# that counts (above the greedy's 1e-12) but below any a row or a report shows.
UNTRIED_GAIN = 1e-6

ScaleRange = tuple[int, int]  # (min, max) GPUs, 1 <= min <= max


class ScaleRangeError(InputError):
    """A GPU range that is not MIN-MAX with 1 <= MIN <= MAX <= 1024."""


def parse_range(text: str) -> ScaleRange | None:
    """``"2-8"`` -> (2, 8); a plain count (``"4"``) -> None (not a range). Anything else
    raises ScaleRangeError naming the form."""
    if "-" not in text:
        return None
    m = _RANGE.fullmatch(text)
    if m is None:
        raise ScaleRangeError(
            f"{text!r} is not a GPU range; write MIN-MAX with whole numbers 1..{MAX_COUNT}, "
            "e.g. 2-8"
        )
    lo, hi = int(m.group(1)), int(m.group(2))
    if lo > hi:
        raise ScaleRangeError(f"{text!r}: the minimum {lo} is above the maximum {hi}; e.g. 2-8")
    if hi > MAX_COUNT:
        raise ScaleRangeError(f"{text!r}: at most {MAX_COUNT} GPUs; write MIN-MAX, e.g. 2-8")
    return lo, hi


def format_range(r: ScaleRange) -> str:
    return f"{r[0]}-{r[1]}"


@dataclass(frozen=True)
class MoldJob:
    """One job as the count choice sees it."""

    id: JobId
    # value(c): steps/s of one run at count c (see the module doc), for every count the
    # job may take; a rigid job has one entry
    value: Mapping[int, float]
    fixed: int | None = None  # it runs at this count now: kept, unless it grows (3.)
    # A running job's steps left and the seconds a restart costs it (3.)
    steps_left: float = 0.0
    restart_s: float = 0.0


def cluster_value(row: Mapping[GpuType, float], capacity: Mapping[GpuType, int]) -> float:
    """A row's steps/s averaged over the cluster's GPUs (types weighted by their count)."""
    total = sum(n for n in capacity.values() if n > 0)
    if total <= 0:
        return 0.0
    return sum(row.get(t, 0.0) * n for t, n in capacity.items() if n > 0) / total


def with_untried(value: Mapping[int, float], top: int) -> dict[int, float]:
    """``value`` and every count above its largest one up to ``top`` (the range's maximum
    that fits on one GPU type), valued a hair above that largest count's (module doc,
    2.): the greedy gives them only GPUs no known gain took. Unchanged when that largest
    count's value is not positive (nothing to grow from)."""
    out = dict(value)
    known = max(value, default=0)
    base = value.get(known, 0.0)
    if base > 0:
        for c in range(known + 1, top + 1):
            out[c] = base * (1 + UNTRIED_GAIN * (c - known))
    return out


def choose_counts(jobs: Iterable[MoldJob], gpus: int) -> dict[JobId, int]:
    """Each job's count this round (module doc): running jobs keep theirs, waiting ones
    start at their least count and grow into the GPUs the others leave idle."""
    jobs = sorted(jobs, key=lambda j: j.id)
    count: dict[JobId, int] = {}
    base: dict[JobId, float] = {}
    for j in jobs:
        if j.fixed is not None:
            count[j.id] = j.fixed
            if j.steps_left > 0 and j.fixed in j.value and j.value[j.fixed] > 0:
                base[j.id] = j.value[j.fixed]
            continue
        c = min(j.value)
        count[j.id] = c
        base[j.id] = j.value[c]
    left = gpus - sum(count.values())
    if left <= 0:
        return count
    growing = {j.id: j for j in jobs if base.get(j.id, 0.0) > 0 and len(j.value) > 1}
    heap: list[tuple[float, JobId, int]] = []
    for j in growing.values():
        _push(heap, j, count[j.id], base[j.id], left)
    while heap and left > 0:
        _, job_id, to = heapq.heappop(heap)
        j = growing[job_id]
        now = count[job_id]
        if to <= now or to - now > left:  # stale, or no longer fits: look again
            _push(heap, j, now, base[job_id], left)
            continue
        count[job_id] = to
        left -= to - now
        _push(heap, j, to, base[job_id], left)
    return count


def _push(
    heap: list[tuple[float, JobId, int]], j: MoldJob, now: int, base: float, left: int
) -> None:
    """The job's best step up from ``now`` that fits in ``left`` GPUs, if it gains."""
    v_now = j.value[now]
    best: tuple[float, int] | None = None
    for c, v in j.value.items():
        if c <= now or c - now > left or v <= v_now:
            continue
        if j.fixed is not None and j.steps_left * (1 / v_now - 1 / v) < RESTART_WORTH * j.restart_s:
            continue  # a running job: not worth its restart
        gain = (v - v_now) / base / (c - now)
        if gain > 1e-12 and (best is None or gain > best[0] or (gain == best[0] and c < best[1])):
            best = (gain, c)
    if best is not None:
        heapq.heappush(heap, (-best[0], j.id, best[1]))


def trace_range(scale_factor: int, largest: int, shrink: bool = True, grow: int = 2) -> ScaleRange:
    """The range ``simulate --moldable`` gives a trace job of n GPUs that names none:
    n/2 .. 2n (at least 1, at most ``largest``, the biggest count the table has for
    its type); n .. 2n without ``shrink`` (--moldable-up-only); up to ``grow`` x n
    instead of 2n (--moldable-grow). In EXPERIMENTS.md."""
    lo = max(1, scale_factor // 2) if shrink else scale_factor
    hi = max(scale_factor, min(grow * scale_factor, largest))
    return lo, hi
