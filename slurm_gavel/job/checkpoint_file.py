"""The bytes of one checkpoint on disk: a plain torch.save file and its integrity record.

``ckpt-<step>.pt`` is exactly what ``torch.save`` writes (a pickle of plain data
without torch), so ``torch.load(path, weights_only=True)`` opens it with nothing of
slurm-gavel installed. Beside it, ``ckpt-<step>.pt.sha256`` holds one line
``sha256 <64 hex digits> <length in bytes>``. Writing streams the payload through the
hash straight into a temporary file (no copy of the whole payload in memory), fsyncs
it, puts the record in place, then renames the payload over its name and fsyncs the
folder: a payload without a matching record is torn, never loaded.

Files written before this format (``GAVELCK1`` magic, the hash and length in a header
in front of the payload) are still read.

Reading treats both files as hostile: opened relative to the checked folder
without following links or blocking, regular files of the job's user only, the record
at most 256 bytes; the payload is hashed by streaming, then loaded without running
code unless ``allow_pickle``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import re
import secrets
import stat
from typing import IO, Any

LEGACY_MAGIC = b"GAVELCK1"
LEGACY_HEADER = len(LEGACY_MAGIC) + 32 + 8
RECORD_SUFFIX = ".sha256"
RECORD_MAX_BYTES = 256
RECORD = re.compile(r"^sha256 ([0-9a-f]{64}) (\d{1,20})\n?$")
CHUNK = 4 << 20
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Unverified(Exception):
    """The payload is missing, torn or corrupt (the message says which)."""


class _HashingWriter:
    """A write-only stream that hashes and counts what passes through it."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.sha = hashlib.sha256()
        self.length = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.length += len(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()


def _dump(obj: Any, out: _HashingWriter) -> None:
    try:
        import torch
    except ImportError:  # a job without torch: plain pickle of plain data
        pickle.dump(obj, out, protocol=pickle.HIGHEST_PROTOCOL)
        return
    torch.save(obj, out)  # type: ignore[arg-type]


def _tmp_file(dir_fd: int, name: str) -> tuple[str, IO[bytes]]:
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    return tmp, os.fdopen(fd, "wb", buffering=CHUNK)


def write_checkpoint_file(dir_fd: int, name: str, obj: Any) -> tuple[str, int]:
    """Stream ``obj`` into ``name`` (and its record) in the folder; (sha256 hex, length)."""
    tmp, f = _tmp_file(dir_fd, name)
    rec_tmp = ""
    try:
        with f:
            out = _HashingWriter(f)
            _dump(obj, out)
            f.flush()
            os.fsync(f.fileno())
        digest, length = out.sha.hexdigest(), out.length
        rec_tmp, r = _tmp_file(dir_fd, name + RECORD_SUFFIX)
        with r:
            r.write(f"sha256 {digest} {length}\n".encode())
            r.flush()
            os.fsync(r.fileno())
        # the record first: a payload under its name always has its record beside it
        os.replace(rec_tmp, name + RECORD_SUFFIX, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        rec_tmp = ""
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        for t in (tmp, rec_tmp):
            if t:
                with contextlib.suppress(OSError):
                    os.unlink(t, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)  # make the renames durable
    return digest, length


def remove_checkpoint_file(dir_fd: int, name: str) -> None:
    for n in (name, name + RECORD_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(n, dir_fd=dir_fd)


def open_own_file(dir_fd: int, name: str) -> IO[bytes]:
    """``name`` in the folder, opened for reading: a regular file of the job's user."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise Unverified(f"{name} is missing") from None
    except OSError as e:
        raise Unverified(f"cannot open {name} ({e.strerror}; a symlink?)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unverified(f"{name} is not a regular file")
        if st.st_uid != os.geteuid():
            raise Unverified(f"{name} belongs to uid {st.st_uid}, not to you")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _record(dir_fd: int, name: str) -> tuple[str, int]:
    with open_own_file(dir_fd, name + RECORD_SUFFIX) as r:
        text = r.read(RECORD_MAX_BYTES + 1)
    m = RECORD.match(text.decode("ascii", "replace")) if len(text) <= RECORD_MAX_BYTES else None
    if m is None:
        raise Unverified(f"{name}{RECORD_SUFFIX} is not an integrity record")
    return m.group(1), int(m.group(2))


def _hash_stream(f: IO[bytes], start: int, limit: int) -> tuple[str, int]:
    f.seek(start)
    sha, n = hashlib.sha256(), 0
    while n <= limit:
        chunk = f.read(min(CHUNK, limit + 1 - n))
        if not chunk:
            break
        sha.update(chunk)
        n += len(chunk)
    return sha.hexdigest(), n


def open_verified(dir_fd: int, name: str) -> tuple[IO[bytes], int]:
    """The payload of ``name``, verified, positioned at its start: (file, offset).

    Raises :class:`Unverified` for a missing, torn or corrupt payload or record.
    """
    f = open_own_file(dir_fd, name)
    try:
        head = f.read(len(LEGACY_MAGIC))
        if head == LEGACY_MAGIC:  # the format before the integrity record
            header = head + f.read(LEGACY_HEADER - len(head))
            if len(header) < LEGACY_HEADER:
                raise Unverified("truncated header")
            digest = header[len(LEGACY_MAGIC) : len(LEGACY_MAGIC) + 32].hex()
            length, start = (
                int.from_bytes(header[len(LEGACY_MAGIC) + 32 :], "little"),
                (LEGACY_HEADER),
            )
        else:
            digest, length = _record(dir_fd, name)
            start = 0
        got, n = _hash_stream(f, start, length)
        if n != length:
            raise Unverified(f"torn ({n} of {length} payload bytes)")
        if got != digest:
            raise Unverified("checksum mismatch (corrupt)")
        f.seek(start)
        return f, start
    except BaseException:
        f.close()
        raise


class PlainUnpickler(pickle.Unpickler):
    """Plain data only: a pickle that names any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def load_payload(f: IO[bytes], start: int, allow_pickle: bool) -> Any:
    """Load the verified payload at ``start`` of ``f`` (see checkpoint.read_checkpoint)."""
    try:
        import torch
    except ImportError:
        if allow_pickle:
            return pickle.load(f)
        return PlainUnpickler(f).load()
    if start:  # torch.load wants the archive at offset 0 of its stream
        f = io.BytesIO(f.read())
    return torch.load(f, weights_only=not allow_pickle, map_location="cpu")
