"""Lightning under slurm-gavel (docs/frameworks/lightning.md)."""

import os

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from slurm_gavel.job.lightning import GavelCallback


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


torch.manual_seed(0)
x = torch.randn(6400, 32)
data = DataLoader(TensorDataset(x, x[:, :10].argmax(dim=1)), batch_size=64)

gavel = GavelCallback()  # takes over from SLURMEnvironment's auto-requeue
steps = int(os.environ.get("GAVEL_TOTAL_STEPS", 100_000))  # --gavel-steps
trainer = L.Trainer(
    max_steps=steps, accelerator="auto", devices=1, callbacks=[gavel], enable_progress_bar=False
)
trainer.fit(Classifier(), data, ckpt_path=gavel.ckpt_path())  # None on the first run
