"""Resuming a GavelJob: the newest checkpoint loaded into the job's objects, and the
world-size rule applied (job/world.py).

Both save paths end in one :class:`Loaded`: the step, the plain values, the
checkpoint's world record (untrusted, read by :func:`~slurm_gavel.job.world.parse_record`)
and its RNG states. :func:`restore_world` then restores this rank's RNG streams when the
world size is the checkpoint's, or reseeds them when it changed, and tells the
:class:`~slurm_gavel.job.world.WorldTracker` (which calls the user's hooks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_gavel.job.checkpoint import load_latest, restore_rng, warn
from slurm_gavel.job.ranks import RANK_RNG_KEY
from slurm_gavel.job.sharded import load_sharded
from slurm_gavel.job.world import (
    FIX,
    WORLD_KEY,
    CheckpointWorldError,
    WorldTracker,
    parse_record,
    reseed_rank,
)


@dataclass(frozen=True)
class Loaded:
    path: Path
    step: int
    values: dict[str, Any]  # the plain (non-state_dict) values restored
    record: Any  # the checkpoint's world record, unchecked
    rank_rngs: Any  # every rank's RNG states (a list), if saved
    own_rng: Any  # the single-file checkpoint's own RNG states (its writer's)


def load_plain(folder: Path, objects: dict[str, Any], allow_pickle: bool) -> Loaded | None:
    """Rank 0's single file: state_dicts loaded into ``objects``, plain values returned."""
    ckpt = load_latest(folder, allow_pickle=allow_pickle)
    if ckpt is None:
        return None
    rank_rngs = ckpt.state.pop(RANK_RNG_KEY, None)
    record = ckpt.state.pop(WORLD_KEY, None)
    values: dict[str, Any] = {}
    for name, obj in objects.items():
        if name not in ckpt.state:
            warn(f"checkpoint {ckpt.path.name} has no '{name}': left as initialised")
        elif hasattr(obj, "load_state_dict"):
            obj.load_state_dict(ckpt.state[name])
        else:
            values[name] = ckpt.state[name]
    return Loaded(ckpt.path, ckpt.step, values, record, rank_rngs, ckpt.rng)


def load_shards(
    group: Any, folder: Path, names: list[str], stateful: dict[str, Any], allow_pickle: bool
) -> Loaded | None:
    """Every rank's part of the newest complete DCP directory (resharded by DCP when
    the world size changed); plain values of ``names`` returned."""
    got = load_sharded(group, folder, stateful, allow_pickle)
    if got is None:
        return None
    path, step, extra = got
    saved = extra.get("values", {})
    values = {n: saved[n] for n in names if isinstance(saved, dict) and n in saved}
    return Loaded(path, step, values, extra.get(WORLD_KEY), extra.get("rng"), None)


def restore_world(world: WorldTracker, got: Loaded, rank: int) -> None:
    """Check the world record; restore this rank's RNG streams, or reseed them on a new
    count; let the tracker note a change (rank 0 says it on stderr)."""
    record = parse_record(got.record, got.rank_rngs, str(got.path))
    rngs = got.rank_rngs
    if record.world_size != world.current:
        rank0 = rngs[0] if isinstance(rngs, list) else got.own_rng
        reseed_rank(rank0, got.step, rank, world.current)
    else:
        mine = rngs[rank] if isinstance(rngs, list) else got.own_rng  # this rank's own
        try:
            if not isinstance(mine, dict):
                raise TypeError(f"a {type(mine).__name__}, not a record of states")
            restore_rng(mine)
        except (TypeError, ValueError, KeyError, IndexError, RuntimeError) as e:
            raise CheckpointWorldError(
                f"checkpoint {got.path}: the RNG states of rank {rank} cannot be restored "
                f"({type(e).__name__}: {str(e)[:100]}); {FIX}"
            ) from None
    world.restored(record, got.step, warn if rank == 0 else lambda _: None)
