"""The on-disk side of sharded checkpoints: one directory per step, complete or ignored.

Layout inside the job's checkpoint folder (checked private as in job/checkpoint.py)::

    dcp-<step, 12 digits>/          a complete checkpoint (renamed into place by rank 0)
        .metadata, __<rank>_<n>.distcp   torch.distributed.checkpoint's files
        gavel.pt, gavel.pt.sha256        step, every rank's RNG states, plain values
        GAVEL-COMPLETE                   the integrity marker, written last
    .dcp-<step>.<random>.partial/   being written; never loaded, removed by a later save

The marker lists every other file of the directory with its SHA-256 and length::

    slurm-gavel-dcp 1
    step 000000000042
    file <64 hex> <length> <name>

Reading treats all of it as hostile: the directory and every file are
opened relative to checked folders without following links or blocking, must belong to
the job's user (the directory not writable by group or others), the marker is bounded
in size and lines, its step must be the directory's, its names plain file names, and
the directory must hold exactly the files it lists, each of the listed length and
hash. Anything else makes the directory incomplete: skipped, never loaded. As with
single-file checkpoints the hashes guard against torn and corrupt files, not against
a writer; the folder's ownership keeps other users out.

Standard library only; the torch side is job/sharded.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from slurm_gavel.job.checkpoint import _check_private, open_private_dir, write_atomic_at
from slurm_gavel.job.checkpoint_file import Unverified, _hash_stream, open_own_file

MARKER = "GAVEL-COMPLETE"
EXTRA = "gavel.pt"  # the plain payload beside the shards (job/checkpoint_file.py format)
HEADER = "slurm-gavel-dcp 1"
MARKER_MAX_BYTES = 1 << 20
MARKER_MAX_FILES = 100_000
KEEP = 2  # complete directories kept: if the newest turns out unreadable, one remains
STEP_DIR = re.compile(r"^dcp-(\d{12})$")
PARTIAL = re.compile(r"^\.dcp-\d{12}\.[0-9a-f]{1,32}\.(partial|old)$")
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$|^\.metadata$")
FILE_LINE = re.compile(r"^file ([0-9a-f]{64}) (\d{1,20}) (\S{1,255})$")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

FileHashes = dict[str, tuple[str, int]]


def step_dir_name(step: int) -> str:
    return f"dcp-{step:012d}"


def partial_dir_name(step: int, token: str) -> str:
    return f".dcp-{step:012d}.{token}.partial"


def open_sub_dir(parent_fd: int, name: str, where: Path) -> int:
    """An fd of folder ``name`` in ``parent_fd``: not a link, the job's own, private.

    Raises :class:`Unverified` (naming ``where``) otherwise.
    """
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        raise Unverified(f"cannot open {where} ({e.strerror}; a symlink?)") from None
    try:
        _check_private(os.fstat(fd), where)
    except Exception as e:
        os.close(fd)
        raise Unverified(str(e)) from None
    return fd


def complete_dirs(folder: Path) -> list[tuple[int, str]]:
    """(step, name) of every complete-looking step directory name, newest first.

    Raises :class:`~slurm_gavel.job.checkpoint.CheckpointDirError` for a folder someone
    else could write. Names only: :func:`verify_share` says whether one is complete.
    """
    fd = open_private_dir(folder, create=False)
    if fd is None:
        return []
    try:
        found = [(int(m.group(1)), n) for n in os.listdir(fd) if (m := STEP_DIR.match(n))]
    finally:
        os.close(fd)
    return sorted(found, reverse=True)


def create_partial(folder: Path, name: str) -> None:
    """Make the private folder (if needed) and the empty partial directory in it."""
    fd = open_private_dir(folder, create=True)
    assert fd is not None  # created
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _in_folder(folder: Path, missing: str) -> Iterator[int]:
    """An fd of the checkpoint folder (the job's own, private) for the block;
    :class:`Unverified` saying ``missing`` when the folder does not exist."""
    fd = open_private_dir(folder, create=False)
    if fd is None:
        raise Unverified(missing)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _in_sub_dir(parent_fd: int, name: str, where: Path) -> Iterator[int]:
    """:func:`open_sub_dir` for the block."""
    sub = open_sub_dir(parent_fd, name, where)
    try:
        yield sub
    finally:
        os.close(sub)


@contextlib.contextmanager
def _in_step_dir(folder: Path, name: str) -> Iterator[int]:
    """An fd of the step directory ``name`` in the checkpoint folder for the block;
    :class:`Unverified` when either does not exist or is not the job's own."""
    missing = f"{folder} does not exist"
    with _in_folder(folder, missing) as fd, _in_sub_dir(fd, name, folder / name) as sub:
        yield sub


def check_partial(folder: Path, name: str) -> None:
    """Every rank, before writing: both folders are the job's own (a shared file system)."""
    missing = f"{folder} does not exist on this node: it must be on a shared file system"
    with _in_folder(folder, missing) as fd:
        os.close(open_sub_dir(fd, name, folder / name))


def list_files(folder: Path, name: str) -> list[str]:
    """The file names in a partial directory (what the marker will list), sorted."""
    fd = open_private_dir(folder, create=False)
    assert fd is not None
    try:
        with _in_sub_dir(fd, name, folder / name) as sub:
            names = sorted(os.listdir(sub))
    finally:
        os.close(fd)
    for n in names:
        if n == MARKER or not SAFE_NAME.match(n):
            raise Unverified(f"unexpected file {n!r} in {folder / name}")
    return names


def my_share(names: list[str], rank: int, world_size: int) -> list[str]:
    """The files one rank hashes (so that the ranks share the reading)."""
    return [n for i, n in enumerate(names) if i % world_size == rank]


def hash_files(
    folder: Path, name: str, names: list[str], expect: FileHashes | None = None
) -> FileHashes:
    """{file: (sha256 hex, length)} of ``names`` in the step directory ``name``.

    With ``expect`` (a marker's list), a file of another length is reported torn
    before it is read.
    """
    with _in_step_dir(folder, name) as sub:
        out: FileHashes = {}
        for n in names:
            with open_own_file(sub, n) as f:
                size = os.fstat(f.fileno()).st_size
                if expect is not None and size != expect[n][1]:
                    raise Unverified(f"{n} is torn ({size} of {expect[n][1]} bytes)")
                digest, length = _hash_stream(f, 0, size)
            if length != size:
                raise Unverified(f"{n} changed while it was hashed")
            out[n] = (digest, length)
        return out


def format_marker(step: int, files: FileHashes) -> bytes:
    lines = [HEADER, f"step {step:012d}"]
    lines += [f"file {d} {n} {name}" for name, (d, n) in sorted(files.items())]
    return ("\n".join(lines) + "\n").encode()


def parse_marker(text: bytes, step: int) -> FileHashes:
    """The files a marker lists; :class:`Unverified` for anything but a well-formed one."""
    if len(text) > MARKER_MAX_BYTES:
        raise Unverified(f"{MARKER} is larger than {MARKER_MAX_BYTES} bytes")
    lines = text.decode("ascii", "replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0] != HEADER:
        raise Unverified(f"{MARKER} is not a slurm-gavel marker")
    if lines[1] != f"step {step:012d}":
        raise Unverified(f"{MARKER} names another step ({lines[1][:40]!r})")
    if len(lines) - 2 > MARKER_MAX_FILES:
        raise Unverified(f"{MARKER} lists more than {MARKER_MAX_FILES} files")
    files: FileHashes = {}
    for line in lines[2:]:
        m = FILE_LINE.match(line)
        if m is None or not SAFE_NAME.match(m.group(3)) or m.group(3) in (MARKER, *files):
            raise Unverified(f"{MARKER} has a bad line {line[:80]!r}")
        files[m.group(3)] = (m.group(1), int(m.group(2)))
    if EXTRA not in files:
        raise Unverified(f"{MARKER} does not list {EXTRA}")
    return files


def finish(folder: Path, partial: str, step: int, files: FileHashes) -> Path:
    """Rank 0, after every rank wrote and hashed: marker, rename into place, prune.

    The marker goes in last inside the partial directory, which is then fsync'ed and
    renamed to its final name (an older directory of that step is moved aside first:
    renaming over a non-empty directory fails), and the folder fsync'ed.
    """
    final = step_dir_name(step)
    with _in_folder(folder, f"{folder} vanished while the checkpoint was written") as fd:
        with _in_sub_dir(fd, partial, folder / partial) as sub:
            write_atomic_at(sub, MARKER, format_marker(step, files))
        aside = partial[: -len("partial")] + "old"
        with contextlib.suppress(FileNotFoundError):
            os.rename(final, aside, src_dir_fd=fd, dst_dir_fd=fd)
        os.rename(partial, final, src_dir_fd=fd, dst_dir_fd=fd)
        os.fsync(fd)
        _prune(fd)
    return folder / final


def _prune(fd: int) -> None:
    """Remove all but the newest KEEP complete directories, and every leftover partial.

    Called by rank 0 once its own partial is renamed: any partial left is from a save
    that died (one job writes one folder at a time).
    """
    names = os.listdir(fd)
    steps = sorted((n for n in names if STEP_DIR.match(n)), reverse=True)
    for n in steps[KEEP:] + [n for n in names if PARTIAL.match(n)]:
        remove_tree_at(fd, n)


def remove_tree_at(parent_fd: int, name: str, depth: int = 0) -> None:
    """Remove folder ``name`` and what it holds, never following a link out of it."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    except OSError:  # a link or a file under a step name: unlink the name itself
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=parent_fd)
        return
    try:
        for entry in os.listdir(fd):
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode) and depth < 4:
                remove_tree_at(fd, entry, depth + 1)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent_fd)


def verify_share(folder: Path, name: str, step: int, rank: int, world_size: int) -> FileHashes:
    """Check one complete-looking directory; hash this rank's share of its files.

    Every rank checks the directory, the marker and that the directory holds exactly
    the files listed; each hashes only its share (the ranks agree on the result with
    one collective, job/sharded.py). Returns the listed files; raises
    :class:`Unverified` saying what is wrong.
    """
    with _in_step_dir(folder, name) as sub:
        with open_own_file(sub, MARKER) as f:
            files = parse_marker(f.read(MARKER_MAX_BYTES + 1), step)
        present = set(os.listdir(sub)) - {MARKER}
    if present != set(files):
        missing, extra = sorted(set(files) - present), sorted(present - set(files))
        raise Unverified(
            f"holds other files than its marker lists (missing {missing[:3]}, extra {extra[:3]})"
        )
    names = sorted(files)
    got = hash_files(folder, name, my_share(names, rank, world_size), files)
    for n, (digest, length) in got.items():
        want_digest, want_length = files[n]
        if length != want_length:
            raise Unverified(f"{n} is torn ({length} of {want_length} bytes)")
        if digest != want_digest:
            raise Unverified(f"{n} does not match its marker (corrupt)")
    return files
