"""Checkpoint folders and files another user could write (trust boundary).

Unpickling runs code: a checkpoint planted by someone else must never be loaded, and
the job's own payload must load without running code. The tests run as root and
hand files to `nobody` (uid 65534) to play the other user.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from waiting import returns_within

from slurm_gavel.job import GavelJob
from slurm_gavel.job.checkpoint import (
    MAGIC,
    CheckpointDirError,
    UnsafeCheckpointError,
    checkpoint_path,
    list_checkpoints,
    load_latest,
    read_checkpoint,
    restore_rng,
    save_checkpoint,
)
from slurm_gavel.job.env import JobEnvError, read_env

pytestmark = [
    pytest.mark.hostile,
    # the planted payloads are plain pickles, which torch.load reads as legacy files
    pytest.mark.filterwarnings("ignore:Detected pickle protocol"),
]

NOBODY = 65534


class Planted:
    """Unpickling this touches a marker file: stands for any code an attacker runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _blob(payload: bytes) -> bytes:
    return MAGIC + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little") + payload


def _plant(folder: Path, step: int, marker: Path) -> Path:
    """A well-formed checkpoint (magic, length, hash all right) whose payload runs code."""
    payload = pickle.dumps({"step": step, "state": {"x": Planted(marker)}, "rng": {}})
    path = checkpoint_path(folder, step)
    path.write_bytes(_blob(payload))
    return path


def _plant_current(folder: Path, step: int, marker: Path) -> Path:
    """The current format (payload + a correct integrity record) running code."""
    payload = pickle.dumps({"step": step, "state": {"x": Planted(marker)}, "rng": {}})
    path = checkpoint_path(folder, step)
    path.write_bytes(payload)
    Path(f"{path}.sha256").write_text(
        f"sha256 {hashlib.sha256(payload).hexdigest()} {len(payload)}\n"
    )
    return path


# each way to plant a payload that runs code: a framed file (magic, length, hash), and
# the current format (a payload beside a correct integrity record)
PLANTERS = {"framed": _plant, "with_a_right_record": _plant_current}


def _private(tmp_path: Path) -> Path:
    folder = tmp_path / "ck"
    folder.mkdir(mode=0o700, parents=True)
    return folder


@pytest.fixture(params=["torch", "no torch"])
def torch_or_not(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no torch":
        monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails
    else:
        pytest.importorskip("torch")
    return str(request.param)


def test_a_new_checkpoint_folder_is_private(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "123"
    save_checkpoint(folder, 1, {"s": 1})
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(checkpoint_path(folder, 1).stat().st_mode) == 0o600


def test_a_folder_of_another_user_is_refused_for_saving_and_loading(tmp_path: Path) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(CheckpointDirError, match=rf"{folder} belongs to uid {NOBODY}.*remove"):
        load_latest(folder)
    with pytest.raises(CheckpointDirError, match="choose another --gavel-checkpoint-dir"):
        save_checkpoint(folder, 2, {"s": 2})
    with pytest.raises(CheckpointDirError):
        read_checkpoint(checkpoint_path(folder, 1))


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o1777])
def test_a_folder_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    folder.chmod(mode)
    with pytest.raises(CheckpointDirError, match=rf"fix: chmod 700 {folder}"):
        load_latest(folder)
    with pytest.raises(CheckpointDirError):
        list_checkpoints(folder)


def test_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    theirs = _private(tmp_path)
    save_checkpoint(theirs, 1, {"s": 1})
    link = tmp_path / "mine"
    link.symlink_to(theirs)
    with pytest.raises(CheckpointDirError, match="symlink or not a folder"):
        load_latest(link)


@pytest.mark.parametrize("planter", sorted(PLANTERS))
def test_a_planted_payload_runs_no_code(tmp_path: Path, torch_or_not: str, planter: str) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    marker = tmp_path / "pwned"
    PLANTERS[planter](folder, 2, marker)
    with pytest.raises(UnsafeCheckpointError, match="GAVEL_CHECKPOINT_ALLOW_PICKLE=1"):
        load_latest(folder)
    assert not marker.exists()


def test_a_checkpoint_file_of_another_user_is_skipped(tmp_path: Path, torch_or_not: str) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    marker = tmp_path / "pwned"
    planted = _plant(folder, 2, marker)
    os.chown(planted, NOBODY, NOBODY)
    ckpt = load_latest(folder, allow_pickle=True)  # even with full unpickling allowed
    assert ckpt is not None and ckpt.step == 1 and not marker.exists()


def test_a_symlinked_checkpoint_file_is_skipped(tmp_path: Path, torch_or_not: str) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    elsewhere = _private(tmp_path / "x")
    marker = tmp_path / "pwned"
    target = _plant(elsewhere, 2, marker)
    checkpoint_path(folder, 2).symlink_to(target)
    ckpt = load_latest(folder, allow_pickle=True)
    assert ckpt is not None and ckpt.step == 1 and not marker.exists()


def test_checkpoint_names_that_are_no_regular_files_never_block(tmp_path: Path) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    os.mkfifo(checkpoint_path(folder, 4))  # a plain read would wait for a writer forever
    checkpoint_path(folder, 3).mkdir()
    os.mknod(checkpoint_path(folder, 2), 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null
    got = returns_within(20, lambda: load_latest(folder), "load_latest on a FIFO")
    assert got is not None and got.step == 1


def test_plain_values_load_without_unpickling_and_others_need_allow_pickle(
    tmp_path: Path, torch_or_not: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _private(tmp_path)
    plain = {"n": 3, "lr": [0.1, (1, 2)], "name": "x", "none": None}
    save_checkpoint(folder, 1, {"plain": plain})
    ckpt = load_latest(folder)
    assert ckpt is not None and ckpt.state["plain"] == plain
    save_checkpoint(folder, 2, {"odd": Path("p")})  # a class instance: not plain data
    with pytest.raises(UnsafeCheckpointError, match="allow_pickle=True"):
        load_latest(folder)
    ckpt = load_latest(folder, allow_pickle=True)
    assert ckpt is not None and ckpt.state["odd"] == Path("p")
    assert "with full unpickling" in capsys.readouterr().err


def test_numpy_rng_state_is_plain_data_and_survives_a_safe_load(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    folder = _private(tmp_path)
    np.random.seed(3)
    save_checkpoint(folder, 1, {})
    want = np.random.random(3)
    np.random.seed(99)
    ckpt = load_latest(folder)
    assert ckpt is not None and isinstance(ckpt.rng["numpy"][1], list)  # not an ndarray
    restore_rng(ckpt.rng)
    assert (np.random.random(3) == want).all()


def test_gaveljob_refuses_a_foreign_folder_and_takes_the_opt_out(tmp_path: Path) -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "GAVEL_CHECKPOINT_DIR": str(tmp_path)}
    save_checkpoint(tmp_path / "7", 4, {"value": Path("v")})
    job = GavelJob(env=env, value=1)
    try:
        with pytest.raises(UnsafeCheckpointError):
            job.resume()
    finally:
        job.close()
    job = GavelJob(env={**env, "GAVEL_CHECKPOINT_ALLOW_PICKLE": "1"}, value=1)
    try:
        assert job.resume() == 4 and job.restored("value") == Path("v")
    finally:
        job.close()
    os.chown(tmp_path / "7", NOBODY, NOBODY)
    job = GavelJob(env=env, value=1, allow_pickle=True)
    try:
        with pytest.raises(CheckpointDirError, match=str(tmp_path / "7")):
            job.resume()
    finally:
        job.close()


@pytest.mark.parametrize("value", ["maybe", "2", "-1"])
def test_allow_pickle_flag_must_be_0_or_1(value: str) -> None:
    with pytest.raises(JobEnvError, match="GAVEL_CHECKPOINT_ALLOW_PICKLE"):
        read_env({"GAVEL_CHECKPOINT_ALLOW_PICKLE": value})
    assert read_env({"GAVEL_CHECKPOINT_ALLOW_PICKLE": "1"}).checkpoint_allow_pickle
    assert not read_env({}).checkpoint_allow_pickle


@pytest.mark.parametrize("record", ["fifo", "symlink", "huge", "other_user", "folder"])
def test_integrity_records_that_are_not_ours_never_load_or_block(
    tmp_path: Path, record: str
) -> None:
    folder = _private(tmp_path)
    save_checkpoint(folder, 1, {"s": 1})
    newest = save_checkpoint(folder, 2, {"s": 2})
    rec = Path(f"{newest}.sha256")
    good = rec.read_bytes()
    rec.unlink()
    if record == "fifo":
        os.mkfifo(rec)  # a plain read would wait for a writer forever
    elif record == "symlink":
        (tmp_path / "elsewhere").write_bytes(good)
        rec.symlink_to(tmp_path / "elsewhere")
    elif record == "huge":
        rec.write_bytes(good + b" " * 10_000_000)
    elif record == "other_user":
        rec.write_bytes(good)
        os.chown(rec, NOBODY, NOBODY)
    else:
        rec.mkdir()
    got = returns_within(20, lambda: load_latest(folder), "load_latest on the record")
    assert got is not None and got.step == 1
