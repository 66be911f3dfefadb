"""Sharded checkpoints: every rank saves its own shard with torch.distributed.checkpoint.

For models whose state is split across ranks (FSDP, tensor parallelism), rank 0 cannot
save the whole state alone. ``GavelJob(..., sharded=True)`` saves through
torch.distributed.checkpoint (DCP) instead: every rank writes its shard into one
directory per step (layout and integrity: job/sharded_dir.py). Saving, a collective:

1. rank 0 creates ``.dcp-<step>.<random>.partial`` in the checked private folder; every
   rank checks that it sees that directory as the job's own (a shared file system);
2. ``dcp.save``: each rank writes its shard, rank 0 the ``.metadata``; rank 0 adds
   ``gavel.pt`` (the step, every rank's RNG states, plain values);
3. the ranks hash their share of the files and gather the hashes (the barrier);
   rank 0 writes the marker, renames the directory to ``dcp-<step>`` and fsyncs;
4. every rank learns that rank 0 succeeded before it goes on or exits.

Model and optimizer go through ``torch.distributed.checkpoint.state_dict``
(``get_state_dict``/``set_state_dict``), so FSDP, DDP and plain modules all save
their sharded form and load into the ranks' current sharding; other objects with
``state_dict`` are saved as theirs.

Resuming: every rank lists the folder (the lists must agree: a shared file system),
then, newest first, every rank checks a directory and hashes its share of the files;
the first directory every rank finds complete is loaded, the others are skipped with
a warning. DCP's ``.metadata`` is a pickle and DCP loads non-tensor values with
``torch.load(weights_only=False)``: both are checked first with loaders that run no
code (the metadata's classes only; weights-only), unless ``allow_pickle``.

torch is imported only inside the functions.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from slurm_gavel.job import sharded_dir as sd
from slurm_gavel.job.checkpoint import ALLOW_PICKLE_HINT, UnsafeCheckpointError, open_private_dir
from slurm_gavel.job.checkpoint_file import (
    Unverified,
    load_payload,
    open_own_file,
    open_verified,
    write_checkpoint_file,
)
from slurm_gavel.job.ranks import RankMismatchError

T = TypeVar("T")
DCP_MODULES = ("torch.distributed.checkpoint.metadata",)
DCP_NAMES = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),
    ("torch", "Size"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


class SoloGroup:
    """A job of one process: the collectives of job/ranks.RankGroup, trivially."""

    rank = 0
    world_size = 1

    def all(self, flag: bool) -> bool:
        return flag

    def gather(self, obj: Any) -> list[Any]:
        return [obj]


def _on_rank0(group: Any, what: str, fn: Callable[[], T]) -> T:
    """``fn()`` on rank 0 only; its result on every rank, its failure raised on every rank."""
    result: Any = None
    error: Exception | None = None
    if group.rank == 0:
        try:
            result = fn()
        except Exception as e:
            error = e
    said = None if error is None else f"{type(error).__name__}: {error}"
    got, failed = group.gather((result, said))[0]
    if error is not None:
        raise error
    if failed is not None:
        raise RankMismatchError(f"rank 0 could not {what}: {failed}")
    return got


def _on_every_rank(group: Any, what: str, fn: Callable[[], T]) -> list[T]:
    """``fn()`` on every rank; all results, or the first failure raised on every rank."""
    result: Any = None
    error: Exception | None = None
    try:
        result = fn()
    except Exception as e:
        error = e
    said = None if error is None else f"{type(error).__name__}: {error}"
    got = group.gather((result, said))
    if error is not None:
        raise error
    for rank, (_, failed) in enumerate(got):
        if failed is not None:
            raise RankMismatchError(f"rank {rank} could not {what}: {failed}")
    return [value for value, _ in got]


class _AppState:
    """The job's stateful objects as one DCP ``Stateful`` (DCP calls these methods)."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    def _module_and_optimizer(self) -> tuple[Any, Any]:
        from torch import nn

        model = self.objects.get("model")
        if not isinstance(model, nn.Module):
            return None, None
        return model, self.objects.get("optimizer")

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        out: dict[str, Any] = {}
        model, optimizer = self._module_and_optimizer()
        if model is not None and optimizer is not None:
            out["model"], out["optimizer"] = get_state_dict(model, optimizer)
        elif model is not None:
            out["model"] = get_model_state_dict(model)
        for name, obj in self.objects.items():
            if name not in out:
                out[name] = obj.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        done = set()
        model, optimizer = self._module_and_optimizer()
        if model is not None and optimizer is not None:
            set_state_dict(
                model,
                optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
            )
            done = {"model", "optimizer"}
        elif model is not None:
            set_model_state_dict(model, state["model"])
            done = {"model"}
        for name, obj in self.objects.items():
            if name not in done:
                obj.load_state_dict(state[name])


class _Refused(pickle.UnpicklingError):
    """A global the metadata may not name (a malformed pickle is another error)."""


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's ``.metadata``: its own classes, torch sizes, dtypes and layouts; nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        # Only these modules are looked into (importing another could run its code).
        refused = _Refused(f"{module}.{name} is not DCP metadata")
        if module not in DCP_MODULES and module not in {m for m, _ in DCP_NAMES}:
            raise refused
        try:
            obj = super().find_class(module, name)
        except (AttributeError, ImportError):
            raise refused from None
        if module in DCP_MODULES and isinstance(obj, type) and obj.__module__ == module:
            return obj
        if (module, name) in DCP_NAMES or (module == "torch" and isinstance(obj, torch.dtype)):
            return obj
        raise refused


@contextlib.contextmanager
def _quiet_if_solo(group: Any) -> Iterator[None]:
    """Without a process group DCP warns that it assumes one process: that is the intent."""
    with warnings.catch_warnings():
        if group.world_size == 1:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _unsafe(path: Path, e: Exception) -> UnsafeCheckpointError:
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    return UnsafeCheckpointError(
        f"checkpoint {path} holds objects that only full unpickling can load ({first}); "
        f"to load it, {ALLOW_PICKLE_HINT}"
    )


def _read_extra(folder: Path, name: str, allow_pickle: bool) -> Any:
    """``gavel.pt`` of a verified directory; ``.metadata`` checked to run no code."""
    fd = open_private_dir(folder, create=False)
    if fd is None:
        raise Unverified(f"{folder} does not exist")
    try:
        sub = sd.open_sub_dir(fd, name, folder / name)
    finally:
        os.close(fd)
    try:
        f, start = open_verified(sub, sd.EXTRA)
        with f:
            try:
                extra = load_payload(f, start, allow_pickle)
            except pickle.UnpicklingError as e:
                raise _unsafe(folder / name / sd.EXTRA, e) from None
            except Exception as e:  # verified bytes that do not load: skipped, never a crash
                raise Unverified(f"cannot load {sd.EXTRA} ({type(e).__name__}: {e})") from None
        if not isinstance(extra, dict):
            raise Unverified(f"{sd.EXTRA} is not a slurm-gavel payload")
        if not allow_pickle:
            with open_own_file(sub, ".metadata") as m:
                try:
                    _MetadataUnpickler(m).load()
                except _Refused as e:
                    raise _unsafe(folder / name / ".metadata", e) from None
                except Exception as e:  # malformed: skipped, never a crash
                    raise Unverified(f"cannot load .metadata ({type(e).__name__}: {e})") from None
    finally:
        os.close(sub)
    return extra


def _planner(allow_pickle: bool) -> Any:
    """DCP's default load planner; its non-tensor values checked weights-only first."""
    import torch
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class WeightsOnlyPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            try:
                torch.load(value, weights_only=True)
            except pickle.UnpicklingError as e:
                raise _unsafe(Path(str(read_item.dest_index.fqn)), e) from None
            value.seek(0)
            super().load_bytes(read_item, value)

    return DefaultLoadPlanner() if allow_pickle else WeightsOnlyPlanner()


def _dcp() -> Any:
    """torch.distributed.checkpoint, or an error naming the version it needs."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"GavelJob(..., sharded=True) needs torch.distributed.checkpoint with "
            f"save/load and state_dict (torch 2.2 or later; tested with 2.13): {e}"
        ) from None
    if not hasattr(dcp, "save"):
        raise ImportError("GavelJob(..., sharded=True) needs torch 2.2 or later (dcp.save)")
    return dcp


def save_sharded(
    group: Any, folder: Path, step: int, objects: dict[str, Any], extra: dict[str, Any]
) -> Path:
    """Every rank saves its shard of ``objects`` at ``step`` (a collective); the path.

    ``extra`` (plain data: step, RNG states, values) is rank 0's and goes to gavel.pt.
    """
    dcp = _dcp()
    partial = sd.partial_dir_name(step, secrets.token_hex(8))

    def create() -> str:
        sd.create_partial(folder, partial)
        return partial

    partial = _on_rank0(group, "create the checkpoint directory", create)
    _on_every_rank(
        group, "open the checkpoint directory", lambda: sd.check_partial(folder, partial)
    )
    writer = dcp.FileSystemWriter(str(folder / partial))  # fsyncs every file it writes
    with _quiet_if_solo(group):  # no process group: DCP saves as a single process
        dcp.save({"app": _AppState(objects)}, storage_writer=writer)

    def write_extra() -> list[str]:
        fd = open_private_dir(folder, create=False)
        assert fd is not None
        try:
            sub = sd.open_sub_dir(fd, partial, folder / partial)
            try:
                write_checkpoint_file(sub, sd.EXTRA, extra)
            finally:
                os.close(sub)
        finally:
            os.close(fd)
        return sd.list_files(folder, partial)

    names = _on_rank0(group, "write the checkpoint's gavel.pt", write_extra)
    mine = sd.my_share(names, group.rank, group.world_size)
    shares = _on_every_rank(
        group, "hash its checkpoint files", lambda: sd.hash_files(folder, partial, mine)
    )
    files = {n: h for share in shares for n, h in share.items()}
    return _on_rank0(
        group, "complete the checkpoint", lambda: sd.finish(folder, partial, step, files)
    )


def load_sharded(
    group: Any, folder: Path, objects: dict[str, Any], allow_pickle: bool
) -> tuple[Path, int, Any] | None:
    """Load the newest directory every rank finds complete into ``objects`` (a collective).

    Returns (path, step, gavel.pt's payload), or None when there is none.
    """
    from slurm_gavel.job.checkpoint import warn

    dcp = _dcp()

    lists = _on_every_rank(group, "list the checkpoint folder", lambda: sd.complete_dirs(folder))
    if any(seen != lists[0] for seen in lists):
        raise RankMismatchError(
            f"the ranks see different checkpoints in {folder}: it must be on a file system "
            f"every node sees (--gavel-checkpoint-dir)"
        )
    for step, name in lists[0]:
        problem = None
        try:
            sd.verify_share(folder, name, step, group.rank, group.world_size)
        except Unverified as e:
            problem = str(e)
        problems = [(r, p) for r, p in enumerate(group.gather(problem)) if p is not None]
        if problems:
            if group.rank == 0:
                rank, why = problems[0]
                warn(f"ignoring incomplete checkpoint {folder / name}: {why} (seen by rank {rank})")
            continue
        extra, outcome = None, ("ok", "")
        try:
            extra = _read_extra(folder, name, allow_pickle)
        except UnsafeCheckpointError as e:
            outcome = ("unsafe", str(e))
        except (Unverified, OSError) as e:
            outcome = ("skip", str(e))
        outcomes = group.gather(outcome)  # the same files on every rank: the same outcome
        unsafe = [said for kind, said in outcomes if kind == "unsafe"]
        if unsafe:
            raise UnsafeCheckpointError(unsafe[0])
        skipped = [(r, said) for r, (kind, said) in enumerate(outcomes) if kind == "skip"]
        if skipped:
            if group.rank == 0:
                rank, why = skipped[0]
                warn(f"ignoring checkpoint {folder / name}: {why} (seen by rank {rank})")
            continue
        reader = dcp.FileSystemReader(str(folder / name))
        try:
            with _quiet_if_solo(group):
                dcp.load(
                    {"app": _AppState(objects)},
                    storage_reader=reader,
                    planner=_planner(allow_pickle),
                )
        except BaseException as e:  # DCP's CheckpointException wraps every rank's error
            failures = getattr(e, "failures", None) or {}
            for failure in failures.values():
                inner = failure[0] if isinstance(failure, tuple) else failure
                if isinstance(inner, UnsafeCheckpointError):
                    raise inner from None
            raise
        return folder / name, step, extra
    return None
