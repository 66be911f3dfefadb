"""Checkpoint files: atomic write, verification, torn/corrupt files ignored."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from slurm_gavel.job.checkpoint import (
    KEEP,
    list_checkpoints,
    load_latest,
    read_checkpoint,
    save_checkpoint,
)


def test_save_then_load_round_trips_state_step_and_python_rng(tmp_path: Path) -> None:
    random.seed(7)
    save_checkpoint(tmp_path, 5, {"weights": [1.0, 2.0], "name": "x"})
    expected_next = random.random()
    random.seed(99)  # disturb
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 5
    assert ckpt.state == {"weights": [1.0, 2.0], "name": "x"}
    random.setstate(ckpt.rng["python"])
    assert random.random() == expected_next
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_only_the_newest_checkpoints_are_kept(tmp_path: Path) -> None:
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, {"s": step})
    assert [s for s, _ in list_checkpoints(tmp_path)] == list(range(5, 5 - KEEP, -1))


DAMAGES = [
    "truncate_payload", "truncate_start", "flip_byte", "empty", "no_record", "bad_record",
    "record_of_another_file",
]  # fmt: skip


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_newest_checkpoint_is_skipped_for_the_older_one(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    older = save_checkpoint(tmp_path, 1, {"s": 1})
    newest = save_checkpoint(tmp_path, 2, {"s": 2})
    record = Path(f"{newest}.sha256")
    blob = newest.read_bytes()
    if damage == "truncate_payload":
        newest.write_bytes(blob[: len(blob) - 10])
    elif damage == "truncate_start":
        newest.write_bytes(blob[:5])
    elif damage == "flip_byte":
        i = len(blob) // 2
        newest.write_bytes(blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1 :])
    elif damage == "empty":
        newest.write_bytes(b"")
    elif damage == "no_record":
        record.unlink()  # a crash between the two renames
    elif damage == "bad_record":
        record.write_text("sha256 nothex 12\n")
    else:
        record.write_bytes(Path(f"{older}.sha256").read_bytes())
    assert read_checkpoint(newest) is None
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 1 and ckpt.state == {"s": 1}
    assert "ignoring checkpoint" in capsys.readouterr().err


def test_no_valid_checkpoint_gives_none(tmp_path: Path) -> None:
    assert load_latest(tmp_path / "missing") is None
    (tmp_path / "ckpt-000000000003.pt").write_bytes(b"GAVELCK1 not really")
    assert load_latest(tmp_path) is None


def test_a_checkpoint_is_a_plain_torch_file_with_its_record_beside_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import hashlib

    path = save_checkpoint(tmp_path, 3, {"w": torch.arange(4.0)})
    plain = torch.load(path, weights_only=True)  # no slurm-gavel needed to open it
    assert plain["step"] == 3 and torch.equal(plain["state"]["w"], torch.arange(4.0))
    blob = path.read_bytes()
    assert Path(f"{path}.sha256").read_text() == (
        f"sha256 {hashlib.sha256(blob).hexdigest()} {len(blob)}\n"
    )


def test_old_checkpoints_those_with_the_header_still_load(tmp_path: Path) -> None:
    """Jobs in flight during an upgrade keep their work."""
    import hashlib
    import io

    torch = pytest.importorskip("torch")
    from slurm_gavel.job.checkpoint import MAGIC, checkpoint_path

    buf = io.BytesIO()
    torch.save({"step": 9, "state": {"s": 9}, "rng": {}}, buf)
    payload = buf.getvalue()
    blob = MAGIC + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little")
    checkpoint_path(tmp_path, 9).write_bytes(blob + payload)
    tmp_path.chmod(0o700)
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 9 and ckpt.state == {"s": 9}


def test_pruning_removes_the_records_too(tmp_path: Path) -> None:
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, {"s": step})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000000003.pt", "ckpt-000000000003.pt.sha256",
        "ckpt-000000000004.pt", "ckpt-000000000004.pt.sha256",
    ]  # fmt: skip
