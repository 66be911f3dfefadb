"""A tiny Lightning job under GavelCallback, for tests/job/test_lightning_on_slurm.py.

Usage: lit_train.py OUT_DIR MAX_STEPS
Logs ``start restart= ckpt= step=`` to OUT_DIR/log, the step in OUT_DIR/step, and at
the end ``done step=N sha256=...`` of the parameters and optimizer state.
"""

import hashlib
import os
import sys
import time
from pathlib import Path

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slurm_gavel.job.lightning import GavelCallback

out, max_steps = Path(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        (out / "step").write_text(f"{self.global_step + 1}\n")
        time.sleep(0.1)  # room for the signal to land mid-run
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Started(L.Callback):
    def on_train_start(self, trainer, pl_module):  # type: ignore[no-untyped-def]
        with open(out / "log", "a") as log:
            print(f"start restart={os.environ.get('SLURM_RESTART_COUNT', '0')} "
                  f"ckpt={ckpt} step={trainer.global_step}", file=log, flush=True)  # fmt: skip


torch.manual_seed(0)
x = torch.randn(800, 8)
data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).sin()), batch_size=8)
model = Tiny()
gavel = GavelCallback()
trainer = L.Trainer(
    max_steps=max_steps, accelerator="cpu", devices=1, callbacks=[gavel, Started()],
    logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, default_root_dir=str(out),
)  # fmt: skip
ckpt = gavel.ckpt_path()
trainer.fit(model, data, ckpt_path=ckpt)
h = hashlib.sha256()
for t in model.state_dict().values():
    h.update(t.detach().contiguous().numpy().tobytes())
with open(out / "log", "a") as log:
    print(f"done step={trainer.global_step} sha256={h.hexdigest()}", file=log, flush=True)
