"""Atomic, self-verifying checkpoints: a torn or corrupt file is never loaded.

File ``ckpt-<step, 12 digits>.pt`` in the checkpoint folder: a plain ``torch.save``
of ``{"step": int, "state": {...}, "rng": {...}}`` (``torch.load(path,
weights_only=True)`` opens it), with its integrity record ``ckpt-<step>.pt.sha256``
beside it (job/checkpoint_file.py: streamed to a temporary file, fsync'ed, renamed,
the folder fsync'ed). A crash (or the node dying) at any point leaves either the
previous checkpoints or the new one complete. On load the length and the hash are
checked before unpickling; anything else is skipped with a warning and the next
older checkpoint is tried.

Whoever can write the checkpoint folder can make the job load a file of their
choosing, and unpickling runs code. So (trust boundary):

* the folder is created mode 0700 and refused (:class:`CheckpointDirError`, naming
  the folder and the fix) when it is a symlink, not owned by the job's user, or
  writable by group or others; files are opened relative to the checked folder,
  without following links, and must be regular files of the job's user;
* payloads load without running code: ``torch.load(weights_only=True)`` (tensors,
  dicts, lists, tuples, numbers, strings), or without torch a pickle reader that
  refuses every global (plain containers and numbers only). The RNG states are
  stored as such plain data. Objects beyond that (a custom class passed as a plain
  ``**stateful`` value) need ``allow_pickle=True`` (``GAVEL_CHECKPOINT_ALLOW_PICKLE=1``),
  which loads with full unpickling and says so on stderr.

The hash guards against torn and corrupt files, not against a writer: anyone who can
write the file can also recompute it. Only the folder's ownership keeps writers out.

torch is imported lazily so that jobs without torch can use the rest of the library.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import re
import secrets
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_gavel.job._errors import InputError
from slurm_gavel.job.checkpoint_file import (
    LEGACY_MAGIC,
    Unverified,
    load_payload,
    open_verified,
    remove_checkpoint_file,
    write_checkpoint_file,
)

MAGIC = LEGACY_MAGIC  # files written before the integrity record (still read)
NAME = re.compile(r"^ckpt-(\d{12})\.pt$")
KEEP = 2  # the newest two: if the newest turns out unreadable, one older remains
ALLOW_PICKLE_HINT = (
    "pass GavelJob(..., allow_pickle=True) or set GAVEL_CHECKPOINT_ALLOW_PICKLE=1, "
    "only if nobody else can write the folder"
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class CheckpointDirError(InputError):
    """The checkpoint folder could be written by someone else than the job's user."""


class UnsafeCheckpointError(InputError):
    """A verified checkpoint holds objects that only full unpickling can load."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    state: dict[str, Any]
    rng: dict[str, Any]


def warn(msg: str) -> None:
    print(f"[slurm-gavel] {msg}", file=sys.stderr, flush=True)


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"ckpt-{step:012d}.pt"


def open_private_dir(folder: Path, *, create: bool) -> int | None:
    """An fd of ``folder`` once checked to be the job's own (None: absent, not created).

    Created mode 0700 (its parents as the umask says). Refused with
    :class:`CheckpointDirError` when it is a symlink or not a folder, belongs to
    another user, or is writable by group or others.
    """
    folder = Path(folder)
    if create:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP (a symlink), ENOTDIR
        raise CheckpointDirError(
            f"checkpoint folder {folder} is a symlink or not a folder ({e.strerror}): "
            f"remove it, or choose another --gavel-checkpoint-dir (GAVEL_CHECKPOINT_DIR)"
        ) from None
    try:
        _check_private(os.fstat(fd), folder)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_private(st: os.stat_result, folder: Path) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise CheckpointDirError(
            f"checkpoint folder {folder} belongs to uid {st.st_uid}, not to you (uid {me}): "
            f"its owner could plant a checkpoint that runs code as you when loaded; remove "
            f"it or choose another --gavel-checkpoint-dir (GAVEL_CHECKPOINT_DIR)"
        )
    if st.st_mode & 0o022:
        raise CheckpointDirError(
            f"checkpoint folder {folder} is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): they could plant a checkpoint that runs code "
            f"as you when loaded; fix: chmod 700 {folder}"
        )


def _names(dir_fd: int) -> list[tuple[int, str]]:
    found = [(int(m.group(1)), n) for n in os.listdir(dir_fd) if (m := NAME.match(n))]
    return sorted(found, reverse=True)


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file name in the folder, newest first.

    Raises :class:`CheckpointDirError` for a folder someone else could write.
    """
    fd = open_private_dir(Path(folder), create=False)
    if fd is None:
        return []
    try:
        return [(step, Path(folder) / name) for step, name in _names(fd)]
    finally:
        os.close(fd)


def capture_rng() -> dict[str, Any]:
    """RNG states of python's random, numpy's global generator and torch (CPU + CUDA)."""
    rng: dict[str, Any] = {"python": random.getstate()}
    if sys.modules.get("numpy") is not None:
        import numpy as np

        # plain data (not an ndarray), so that a weights-only load accepts it
        name, keys, pos, has_gauss, cached = np.random.get_state()
        rng["numpy"] = [str(name), [int(k) for k in keys], int(pos), int(has_gauss), cached]
    if sys.modules.get("torch") is not None:
        import torch

        rng["torch"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["torch_cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict[str, Any]) -> None:
    if "python" in rng:
        random.setstate(rng["python"])
    if "numpy" in rng:
        import numpy as np

        name, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "torch" in rng:
        import torch

        torch.set_rng_state(rng["torch"])
        if "torch_cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["torch_cuda"])


def write_atomic_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``name`` in the folder ``dir_fd`` so readers see the old or the whole new file.

    A temporary file of that folder (created exclusively, never through a link),
    fsync'ed, chmod'ed to ``mode``, renamed over ``name``; then the folder is fsync'ed.
    """
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)  # make the rename itself durable


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write bytes to path so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic_at(dir_fd, path.name, data, mode)
    finally:
        os.close(dir_fd)


def save_checkpoint(folder: Path, step: int, state: dict[str, Any]) -> Path:
    """Save ``state`` (already state_dicts / plain data) with the RNG states at ``step``.

    Streamed to disk (the payload is never held in memory a second time).
    """
    path = checkpoint_path(folder, step)
    dir_fd = open_private_dir(Path(folder), create=True)
    assert dir_fd is not None  # created above
    try:
        payload = {"step": step, "state": state, "rng": capture_rng()}
        write_checkpoint_file(dir_fd, path.name, payload)
        for _, old in _names(dir_fd)[KEEP:]:
            remove_checkpoint_file(dir_fd, old)
    finally:
        os.close(dir_fd)
    return path


def read_checkpoint(path: Path, *, allow_pickle: bool = False) -> Checkpoint | None:
    """The checkpoint in ``path``, or None (with a warning) if it is torn or corrupt.

    Raises :class:`CheckpointDirError` when its folder is not the job's own, and
    :class:`UnsafeCheckpointError` when it verifies but holds more than plain data
    and ``allow_pickle`` is False.
    """
    path = Path(path)
    dir_fd = open_private_dir(path.parent, create=False)
    if dir_fd is None:
        warn(f"ignoring checkpoint {path}: its folder does not exist")
        return None
    try:
        f, start = open_verified(dir_fd, path.name)
    except Unverified as e:
        warn(f"ignoring checkpoint {path}: {e}")
        return None
    finally:
        os.close(dir_fd)
    if allow_pickle:
        warn(
            f"loading {path} with full unpickling (allow_pickle): whoever can write "
            f"{path.parent} can run code as you"
        )
    try:
        with f:
            data = load_payload(f, start, allow_pickle)
    except pickle.UnpicklingError as e:
        if allow_pickle:
            warn(f"ignoring checkpoint {path}: cannot load it ({e})")
            return None
        # Verified, so most likely our own file holding a non-plain **stateful value:
        # starting over from step 0 in silence would throw the work away.
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise UnsafeCheckpointError(
            f"checkpoint {path} holds objects that only full unpickling can load "
            f"({first}); to load it, {ALLOW_PICKLE_HINT}"
        ) from None
    except Exception as e:  # verified bytes that still do not load: skip, never crash
        warn(f"ignoring checkpoint {path}: cannot load it ({type(e).__name__}: {e})")
        return None
    try:
        return Checkpoint(path, int(data["step"]), data["state"], data.get("rng", {}))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        warn(f"ignoring checkpoint {path}: not a slurm-gavel payload ({type(e).__name__})")
        return None


def load_latest(folder: Path, *, allow_pickle: bool = False) -> Checkpoint | None:
    """The newest checkpoint in ``folder`` that verifies, or None (see read_checkpoint)."""
    for _, path in list_checkpoints(folder):
        ckpt = read_checkpoint(path, allow_pickle=allow_pickle)
        if ckpt is not None:
            return ckpt
    return None
