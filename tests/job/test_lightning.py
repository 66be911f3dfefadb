"""GavelCallback's resume path treats the checkpoint folder as hostile (the trust boundary)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("lightning")
from slurm_gavel.job import CheckpointDirError
from slurm_gavel.job.lightning import CHECKPOINT_NAME, GavelCallback

pytestmark = [pytest.mark.torch]


def _callback(folder: Path, restarts: int) -> GavelCallback:
    env = {"SLURM_JOB_ID": "9", "SLURM_RESTART_COUNT": str(restarts)}
    return GavelCallback(env=env, checkpoint_dir=folder)


def test_no_resume_outside_slurm_or_on_a_first_run(tmp_path: Path) -> None:
    assert GavelCallback(env={}).ckpt_path() is None
    assert _callback(tmp_path, 0).ckpt_path() is None
    assert _callback(tmp_path / "absent", 1).ckpt_path() is None


def test_resume_names_our_own_file(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir(mode=0o700)
    (folder / CHECKPOINT_NAME).write_bytes(b"x")
    assert _callback(folder, 1).ckpt_path() == str(folder / CHECKPOINT_NAME)


@pytest.mark.hostile
def test_a_symlinked_checkpoint_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir(mode=0o700)
    (tmp_path / "planted").write_bytes(b"x")
    os.symlink(tmp_path / "planted", folder / CHECKPOINT_NAME)
    with pytest.raises(CheckpointDirError, match="not a regular file of yours"):
        _callback(folder, 1).ckpt_path()


@pytest.mark.hostile
def test_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    folder.chmod(0o777)
    (folder / CHECKPOINT_NAME).write_bytes(b"x")
    with pytest.raises(CheckpointDirError, match="chmod 700"):
        _callback(folder, 1).ckpt_path()
