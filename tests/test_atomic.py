"""atomic.write_atomic and its users: the state, the status view and throughput tables."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_gavel.atomic import write_atomic
from slurm_gavel.daemon.state_store import StateStore
from slurm_gavel.domain.throughputs import load_table


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each os.fsync call synced: 'file NAME' or 'dir NAME'."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
        seen.append(f"{kind} {os.readlink(f'/proc/self/fd/{fd}')}")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_the_file_is_replaced_with_its_mode_and_no_temporary_is_left(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    target.write_text("old")
    write_atomic(target, b"new", mode=0o644)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_a_failure_before_the_rename_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    target.write_text("old")

    def fail() -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        write_atomic(target, b"new", before_replace=fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_data_then_the_folder_are_fsynced(tmp_path: Path, fsyncs: list[str]) -> None:
    write_atomic(tmp_path / "t.json", b"new")
    assert len(fsyncs) == 2
    assert fsyncs[0].startswith(f"file {tmp_path}/.t.json.") and fsyncs[0].endswith(".tmp")
    assert fsyncs[1] == f"dir {tmp_path}"


def test_a_saved_throughput_table_is_fsynced_and_readable_by_all(
    tmp_path: Path, fsyncs: list[str]
) -> None:
    # The learned table and `slurm-gavel profile`'s output: before the shared helper
    # the table was renamed into place without an fsync (lost to a power cut).
    out = tmp_path / "learned.json"
    load_table(None).save(out)
    assert [s.split()[0] for s in fsyncs] == ["file", "dir"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert load_table(out).to_json() == load_table(None).to_json()


def test_the_state_keeps_its_previous_copy_and_is_fsynced(
    tmp_path: Path, fsyncs: list[str]
) -> None:
    store = StateStore(tmp_path)
    store.acquire()
    try:
        store.save({"round": 1})
        store.save({"round": 2})
        fsyncs.clear()
        store.save({"round": 3})
        assert [s.split()[0] for s in fsyncs] == ["file", "dir"]
        assert (store.load() or {}).get("round") == 3
        assert '"round":2' in store.prev_path.read_text()
    finally:
        store.release()
