"""Atomic, self-verifying checkpoints: a torn or corrupt file is never loaded.

File ``ckpt-<step, 12 digits>.pt`` in the checkpoint folder::

    b"GAVELCK1"  8 bytes   magic
    sha256       32 bytes  of the payload
    length       8 bytes   payload length, little endian
    payload      torch.save() of {"step": int, "state": {...}, "rng": {...}}

Written to a temporary file in the same folder, fsync'ed, renamed over the final
name, and the folder fsync'ed, so a crash (or the node dying) at any point leaves
either the previous checkpoints or the new one complete. On load the magic, the
length and the hash are checked before unpickling; anything else is skipped with
a warning and the next older checkpoint is tried.

torch is imported lazily so that jobs without torch can use the rest of the library.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"GAVELCK1"
HEADER = len(MAGIC) + 32 + 8
NAME = re.compile(r"^ckpt-(\d{12})\.pt$")
KEEP = 2  # the newest two: if the newest turns out unreadable, one older remains


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


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file name in the folder, newest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.match(p.name))]
    return sorted(found, reverse=True)


def capture_rng() -> dict[str, Any]:
    """RNG states of python's random, numpy's global generator and torch (CPU + CUDA)."""
    rng: dict[str, Any] = {"python": random.getstate()}
    if sys.modules.get("numpy") is not None:
        import numpy as np

        rng["numpy"] = np.random.get_state()
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

        np.random.set_state(rng["numpy"])
    if "torch" in rng:
        import torch

        torch.set_rng_state(rng["torch"])
        if "torch_cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["torch_cuda"])


def _serialize(obj: Any) -> bytes:
    buf = io.BytesIO()
    try:
        import torch

        torch.save(obj, buf)
    except ImportError:  # a job without torch: plain pickle of plain data
        import pickle

        pickle.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
    return buf.getvalue()


def _deserialize(data: bytes) -> Any:
    try:
        import torch
    except ImportError:
        import pickle

        return pickle.loads(data)
    # weights_only=False: the payload holds numpy RNG state and python tuples. It is
    # our own file, verified by hash above, in the user's own checkpoint folder.
    return torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")


def write_atomic(path: Path, data: bytes) -> None:
    """Write bytes to path so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def save_checkpoint(folder: Path, step: int, state: dict[str, Any]) -> Path:
    """Save ``state`` (already state_dicts / plain data) with the RNG states at ``step``."""
    payload = _serialize({"step": step, "state": state, "rng": capture_rng()})
    digest = hashlib.sha256(payload).digest()
    blob = MAGIC + digest + len(payload).to_bytes(8, "little") + payload
    path = checkpoint_path(folder, step)
    write_atomic(path, blob)
    for _, old in list_checkpoints(folder)[KEEP:]:
        old.unlink(missing_ok=True)
    return path


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint in ``path``, or None (with a warning) if it is torn or corrupt."""
    try:
        blob = path.read_bytes()
    except OSError as e:
        warn(f"ignoring checkpoint {path}: cannot read it ({e.strerror})")
        return None
    if len(blob) < HEADER or blob[: len(MAGIC)] != MAGIC:
        warn(f"ignoring checkpoint {path}: not a slurm-gavel checkpoint or truncated header")
        return None
    digest = blob[len(MAGIC) : len(MAGIC) + 32]
    length = int.from_bytes(blob[len(MAGIC) + 32 : HEADER], "little")
    payload = blob[HEADER:]
    if len(payload) != length:
        warn(f"ignoring checkpoint {path}: torn ({len(payload)} of {length} payload bytes)")
        return None
    if hashlib.sha256(payload).digest() != digest:
        warn(f"ignoring checkpoint {path}: checksum mismatch (corrupt)")
        return None
    try:
        data = _deserialize(payload)
        return Checkpoint(path, int(data["step"]), data["state"], data.get("rng", {}))
    except Exception as e:  # verified bytes that still do not load: skip, never crash
        warn(f"ignoring checkpoint {path}: cannot load it ({type(e).__name__}: {e})")
        return None


def load_latest(folder: Path) -> Checkpoint | None:
    """The newest checkpoint in ``folder`` that verifies, or None."""
    for _, path in list_checkpoints(folder):
        ckpt = read_checkpoint(path)
        if ckpt is not None:
            return ckpt
    return None
