"""The job's world size across restarts, and a global batch that stays the same.

slurm-gavel may restart a moldable job on another number of GPUs. The job
then runs with another number of ranks; this module is what follows the count:

* :class:`BatchPlan` / :func:`plan_batch`: the user declares the **global batch** (the
  samples behind one optimizer step) and the **micro batch** (what one rank computes in
  one forward/backward); the gradient accumulation steps follow from the world size,
  ``global = micro x world x accumulation``, so one step means the same whatever count
  the job was given. ``keep_global_batch=False`` opts out: the accumulation steps stay
  as given and the global batch follows the count.
* :class:`WorldRecord`: what a checkpoint says about the run that wrote it (world size,
  batch). Read from an untrusted file: :func:`parse_record` refuses anything but plain
  positive integers in range, with :class:`CheckpointWorldError` naming the file, the
  field and the fix.
* :class:`WorldTracker`: the component :class:`~slurm_gavel.job.loop.GavelJob` keeps;
  it knows the current and the previous world size and calls the hooks registered for
  a change.
* :func:`reseed_rank`: the RNG rule when the count changed (per-rank streams cannot be
  handed one to one to another number of ranks): each rank is reseeded from the
  checkpoint's rank-0 state, the step, its rank and the new world size, so the streams
  differ between ranks and a resume repeated the same way repeats them.

Standard library only (numpy and torch are seeded when the job has imported them).
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_gavel.job._errors import InputError

WORLD_KEY = "_gavel_world"  # inside a checkpoint's state (rank 0 file) or gavel.pt
MAX_WORLD_SIZE = 1 << 20  # ranks; more is a corrupt or hostile field, not a cluster
MAX_BATCH = 1 << 40  # samples; a bound so that arithmetic on a field stays small


class BatchPlanError(InputError):
    """A global/micro batch declaration that cannot be kept at this world size."""


class CheckpointWorldError(InputError):
    """A checkpoint's world-size record or RNG states are not what slurm-gavel writes."""


def _count(value: Any, name: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BatchPlanError(f"{name}={value!r} must be a whole number (e.g. {name}=256)")
    if not 1 <= value <= limit:
        raise BatchPlanError(f"{name}={value} must be between 1 and {limit}")
    return value


@dataclass(frozen=True)
class BatchPlan:
    """How one optimizer step is split: ``global_batch = micro x world x accumulation``."""

    global_batch: int
    micro_batch: int
    world_size: int
    accumulation_steps: int
    keep_global_batch: bool = True

    @property
    def loss_scale(self) -> float:
        """Multiply each micro batch's mean loss by this before ``backward()``.

        With gradients averaged over the ranks (DDP, FSDP), the accumulated gradient is
        then the mean over the whole global batch, as in one big batch.
        """
        return 1.0 / self.accumulation_steps

    def micro_slices(self, step: int, rank: int) -> list[range]:
        """The global sample indices ``rank`` computes at ``step``, one range per micro step.

        Step ``s`` covers samples ``[s * global_batch, (s + 1) * global_batch)``; each rank
        takes a contiguous share of ``micro_batch x accumulation_steps``. Indexing the data
        this way makes the samples behind a step independent of the world size.
        """
        if not 0 <= rank < self.world_size:
            raise BatchPlanError(f"rank {rank} is not in a world of {self.world_size} ranks")
        first = step * self.global_batch + rank * self.micro_batch * self.accumulation_steps
        return [
            range(first + k * self.micro_batch, first + (k + 1) * self.micro_batch)
            for k in range(self.accumulation_steps)
        ]


def plan_batch(
    global_batch: int | None,
    micro_batch: int,
    world_size: int,
    *,
    keep_global_batch: bool = True,
    accumulation_steps: int = 1,
) -> BatchPlan:
    """The accumulation steps that keep ``global_batch`` on ``world_size`` ranks.

    With ``keep_global_batch=False``, ``accumulation_steps`` is kept instead and the
    global batch is what the ranks make of it. Raises :class:`BatchPlanError` naming
    the values that do not fit, and which would.
    """
    micro = _count(micro_batch, "micro_batch", MAX_BATCH)
    world = _count(world_size, "world_size", MAX_WORLD_SIZE)
    if not keep_global_batch:
        accum = _count(accumulation_steps, "accumulation_steps", MAX_BATCH)
        return BatchPlan(micro * world * accum, micro, world, accum, keep_global_batch=False)
    if global_batch is None:
        raise BatchPlanError(
            "give global_batch (the samples per optimizer step) with micro_batch, or pass "
            "keep_global_batch=False to let the global batch follow the number of ranks"
        )
    glob = _count(global_batch, "global_batch", MAX_BATCH)
    per_step = micro * world
    if glob % per_step:
        fits = [d for d in range(1, micro + 1) if glob % (d * world) == 0]
        hint = (
            f"a micro batch of {fits[-1]} fits"
            if fits
            else f"no micro batch fits {world} ranks; choose a multiple of {world}"
        )
        raise BatchPlanError(
            f"global_batch={glob} is not a multiple of micro_batch={micro} x {world} ranks "
            f"= {per_step}: {hint}, or choose a global batch that is a multiple of "
            f"{per_step} (e.g. {max(per_step, glob // per_step * per_step)}); a moldable "
            f"job (scale=MIN-MAX) needs one that every count in its range divides"
        )
    return BatchPlan(glob, micro, world, glob // per_step)


@dataclass(frozen=True)
class WorldRecord:
    """What a checkpoint says about the run that wrote it."""

    world_size: int
    global_batch: int | None = None
    micro_batch: int | None = None
    accumulation_steps: int | None = None

    def to_dict(self) -> dict[str, int]:
        """Plain data for the checkpoint (a weights-only load reads it)."""
        out = {"world_size": self.world_size}
        for name in ("global_batch", "micro_batch", "accumulation_steps"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


FIELDS = {
    "world_size": MAX_WORLD_SIZE,
    "global_batch": MAX_BATCH,
    "micro_batch": MAX_BATCH,
    "accumulation_steps": MAX_BATCH,
}
FIX = "remove it (the job then resumes from the checkpoint before) or restore it from a copy"


def parse_record(raw: Any, rank_rngs: Any, where: str) -> WorldRecord:
    """The record of the checkpoint ``where`` (untrusted); ``rank_rngs`` its RNG list.

    A checkpoint written before world sizes were recorded has none: its world size is
    the length of its per-rank RNG list (1 when it has none). Anything else than plain
    integers in range, or a record the RNG list contradicts, raises
    :class:`CheckpointWorldError`.
    """
    ranks = len(rank_rngs) if isinstance(rank_rngs, list) else None
    if raw is None:
        if ranks is not None and not 1 <= ranks <= MAX_WORLD_SIZE:
            raise CheckpointWorldError(f"checkpoint {where} has RNG states of {ranks} ranks")
        return WorldRecord(ranks or 1)
    if not isinstance(raw, Mapping):
        raise CheckpointWorldError(
            f"checkpoint {where}: its {WORLD_KEY} is a {type(raw).__name__}, not a record; {FIX}"
        )
    unknown = sorted(str(k)[:40] for k in raw if k not in FIELDS)
    if unknown:
        raise CheckpointWorldError(f"checkpoint {where}: unknown {WORLD_KEY} fields {unknown}")
    values: dict[str, int] = {}
    for name, limit in FIELDS.items():
        if name not in raw:
            continue
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise CheckpointWorldError(
                f"checkpoint {where}: {name}={str(repr(value))[:60]} is not a whole number "
                f"from 1 to {limit}; {FIX}"
            )
        values[name] = value
    if "world_size" not in values:
        raise CheckpointWorldError(f"checkpoint {where}: its {WORLD_KEY} has no world_size; {FIX}")
    if ranks is not None and ranks != values["world_size"]:
        raise CheckpointWorldError(
            f"checkpoint {where}: world_size={values['world_size']} but RNG states of "
            f"{ranks} ranks; {FIX}"
        )
    return WorldRecord(**values)


@dataclass(frozen=True)
class WorldChange:
    """Passed to the hooks: the run resumed on another number of ranks."""

    previous: int
    current: int
    step: int
    batch: BatchPlan | None


Hook = Callable[[WorldChange], Any]


class WorldTracker:
    """The current and previous world size of one job, its batch plan and its hooks."""

    def __init__(
        self,
        global_batch: int | None = None,
        micro_batch: int | None = None,
        *,
        keep_global_batch: bool = True,
        accumulation_steps: int = 1,
        on_change: Hook | None = None,
    ) -> None:
        if global_batch is not None and micro_batch is None:
            raise BatchPlanError("global_batch needs micro_batch (the samples one rank computes)")
        if not keep_global_batch and micro_batch is None:
            raise BatchPlanError("keep_global_batch=False needs micro_batch")
        self._ask = (global_batch, micro_batch, keep_global_batch, accumulation_steps)
        if micro_batch is not None:  # check the values now, the fit at start()
            _count(micro_batch, "micro_batch", MAX_BATCH)
            if keep_global_batch and global_batch is not None:
                _count(global_batch, "global_batch", MAX_BATCH)
            else:
                _count(accumulation_steps, "accumulation_steps", MAX_BATCH)
        self.current = 1
        self.previous: int | None = None
        self.batch: BatchPlan | None = None
        self.change: WorldChange | None = None
        self._hooks: list[Hook] = [] if on_change is None else [on_change]

    def start(self, world_size: int) -> None:
        """The run's world size is known: make the batch plan (errors say what fits)."""
        self.current = world_size
        glob, micro, keep, accum = self._ask
        if micro is not None:
            self.batch = plan_batch(
                glob, micro, world_size, keep_global_batch=keep, accumulation_steps=accum
            )

    def record(self) -> dict[str, int]:
        b = self.batch
        if b is None:
            return WorldRecord(self.current).to_dict()
        return WorldRecord(
            self.current, b.global_batch, b.micro_batch, b.accumulation_steps
        ).to_dict()

    def restored(self, record: WorldRecord, step: int, say: Callable[[str], None]) -> None:
        """The checkpoint's record is read: note a change, tell the user, run the hooks."""
        self.previous = record.world_size
        if record.world_size == self.current:
            return
        self.change = WorldChange(record.world_size, self.current, step, self.batch)
        say(self._describe(record))
        for hook in list(self._hooks):
            hook(self.change)

    def _describe(self, record: WorldRecord) -> str:
        head = f"world size changed {record.world_size} -> {self.current} ranks at step"
        head += f" {self.change.step if self.change else '?'}"
        b = self.batch
        if b is None:
            return (
                f"{head}; no global batch declared (GavelJob(global_batch=..., "
                f"micro_batch=...)): the samples per step change with the ranks"
            )
        if not b.keep_global_batch:
            return f"{head}; keep_global_batch=False: the global batch is now {b.global_batch}"
        said = f"{head}; global batch {b.global_batch} kept: {b.accumulation_steps} accumulation"
        said += f" steps of {b.micro_batch} per rank"
        if record.global_batch is not None and record.global_batch != b.global_batch:
            said += f" (the checkpoint's run had a global batch of {record.global_batch})"
        return said

    def add_hook(self, hook: Hook) -> Hook:
        """Call ``hook(change)`` on a resume at another world size (now, if that was it)."""
        self._hooks.append(hook)
        if self.change is not None:
            hook(self.change)
        return hook


def reseed_rank(rank0_rng: Any, step: int, rank: int, world_size: int) -> int:
    """Seed Python's, numpy's (if imported) and torch's (if imported) RNGs for ``rank``.

    The seed is a hash of the checkpoint's rank-0 Python RNG state, the step, the rank
    and the world size: distinct per rank, the same when the same resume is repeated.
    Returns it.
    """
    base = repr(rank0_rng.get("python")) if isinstance(rank0_rng, Mapping) else ""
    digest = hashlib.sha256(f"{base}|{step}|{rank}|{world_size}".encode()).digest()
    seed = int.from_bytes(digest[:8], "little") >> 1
    random.seed(seed)
    if sys.modules.get("numpy") is not None:
        import numpy as np

        np.random.seed(seed % (1 << 32))
    if sys.modules.get("torch") is not None:
        import torch

        torch.manual_seed(seed)  # CUDA's generators too
    return seed
