"""GavelCallback follows the world size: the accumulation that keeps the
global batch, the world record in the checkpoint, the hook on a resume at another
count, and a hostile record in the checkpoint. One CPU process (a 2-process DDP fit is
tests/job/test_lightning_on_slurm.py's, without a change of count)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")
import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slurm_gavel.job import CheckpointWorldError, WorldChange
from slurm_gavel.job.lightning import CHECKPOINT_NAME, GavelCallback
from slurm_gavel.job.world import WORLD_KEY

pytestmark = [pytest.mark.torch, pytest.mark.slow]


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.batches += 1
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(gavel: GavelCallback, steps: int, ckpt: str | None = None, batch: int = 8) -> Tiny:
    torch.manual_seed(0)
    x = torch.randn(400, 4)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch)
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[gavel],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Tiny()
    trainer.fit(model, data, ckpt_path=ckpt)
    return model


def test_the_declared_global_batch_sets_the_accumulation(tmp_path: Path) -> None:
    gavel = GavelCallback(env={}, global_batch=32, micro_batch=8)
    model = _fit(gavel, 3)
    assert (gavel.world_size, gavel.batch.accumulation_steps if gavel.batch else 0) == (1, 4)
    assert model.batches == 12  # 3 optimizer steps of 4 micro batches of 8


def test_a_resume_at_another_world_size_calls_the_hook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"SLURM_JOB_ID": "3", "SLURM_RESTART_COUNT": "0"}
    first = GavelCallback(env=env, checkpoint_dir=tmp_path / "ck", global_batch=16, micro_batch=8)
    first.request_checkpoint()
    with pytest.raises(SystemExit) as stop:
        _fit(first, 5)
    assert stop.value.code == 99
    path = tmp_path / "ck" / CHECKPOINT_NAME
    saved = torch.load(path, weights_only=True)
    (state,) = [v for k, v in saved["callbacks"].items() if "GavelCallback" in k]
    assert state[WORLD_KEY] == {
        "world_size": 1,
        "global_batch": 16,
        "micro_batch": 8,
        "accumulation_steps": 2,
    }
    state[WORLD_KEY] = {"world_size": 2, "global_batch": 16, "micro_batch": 8}  # 2 ranks wrote it
    torch.save(saved, path)

    seen: list[WorldChange] = []
    env["SLURM_RESTART_COUNT"] = "1"
    again = GavelCallback(
        env=env, checkpoint_dir=tmp_path / "ck", global_batch=16, micro_batch=8,
        on_world_size_change=seen.append,
    )  # fmt: skip
    model = _fit(again, 3, again.ckpt_path())
    assert [(c.previous, c.current, c.step) for c in seen] == [(2, 1, 1)]
    assert (again.previous_world_size, again.world_size) == (2, 1)
    assert model.batches == 4  # steps 2 and 3, 2 micro batches each
    assert "world size changed 2 -> 1 ranks at step 1; global batch 16 kept" in (
        capsys.readouterr().err
    )


@pytest.mark.hostile
@pytest.mark.parametrize("bad", [-1, "2", 1 << 40])
def test_a_hostile_world_record_in_the_checkpoint_stops_the_fit(tmp_path: Path, bad: Any) -> None:
    env = {"SLURM_JOB_ID": "3", "SLURM_RESTART_COUNT": "0"}
    first = GavelCallback(env=env, checkpoint_dir=tmp_path / "ck")
    first.request_checkpoint()
    with pytest.raises(SystemExit):
        _fit(first, 5)
    path = tmp_path / "ck" / CHECKPOINT_NAME
    saved = torch.load(path, weights_only=True)
    for state in saved["callbacks"].values():
        if WORLD_KEY in state:
            state[WORLD_KEY] = {"world_size": bad}
    torch.save(saved, path)
    env["SLURM_RESTART_COUNT"] = "1"
    again = GavelCallback(env=env, checkpoint_dir=tmp_path / "ck")
    with pytest.raises(CheckpointWorldError, match=r"world_size=.* is not a whole number"):
        _fit(again, 3, again.ckpt_path())


def test_a_loader_batch_other_than_the_micro_batch_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fit(GavelCallback(env={}, global_batch=32, micro_batch=8), 1, batch=16)
    assert "batch_size=16 is not micro_batch=8" in capsys.readouterr().err
