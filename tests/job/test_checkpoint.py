"""Checkpoint files: atomic write, verification, torn/corrupt files ignored."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from slurm_gavel.job.checkpoint import (
    HEADER,
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


@pytest.mark.parametrize("damage", ["truncate_payload", "truncate_header", "flip_byte", "empty"])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_older_one(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoint(tmp_path, 1, {"s": 1})
    newest = save_checkpoint(tmp_path, 2, {"s": 2})
    blob = newest.read_bytes()
    if damage == "truncate_payload":
        newest.write_bytes(blob[: len(blob) - 10])
    elif damage == "truncate_header":
        newest.write_bytes(blob[: HEADER - 3])
    elif damage == "flip_byte":
        i = HEADER + (len(blob) - HEADER) // 2
        newest.write_bytes(blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1 :])
    else:
        newest.write_bytes(b"")
    assert read_checkpoint(newest) is None
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 1 and ckpt.state == {"s": 1}
    assert "ignoring checkpoint" in capsys.readouterr().err


def test_no_valid_checkpoint_gives_none(tmp_path: Path) -> None:
    assert load_latest(tmp_path / "missing") is None
    (tmp_path / "ckpt-000000000003.pt").write_bytes(b"GAVELCK1 not really")
    assert load_latest(tmp_path) is None
