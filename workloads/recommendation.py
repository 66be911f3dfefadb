"""Autoencoder recommender (NVIDIA DeepRecommender-style, MovieLens-20M in Gavel's
Recommendation workload) on synthetic sparse rating vectors."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from workloads.trainer import Family, Trainer, main


def autoencoder(items: int, layers: list[int], dropout: float) -> nn.Module:
    enc: list[nn.Module] = []
    sizes = [items, *layers]
    for a, b in itertools.pairwise(sizes):
        enc += [nn.Linear(a, b), nn.SELU()]
    dec: list[nn.Module] = []
    rev = sizes[::-1]
    for a, b in itertools.pairwise(rev):
        dec += [nn.Linear(a, b), nn.SELU()]
    return nn.Sequential(*enc, nn.Dropout(dropout), *dec[:-1])


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    if tiny:
        items, layers, batch, density = 64, [8, 8], min(batch_size, 8), 0.2
    else:  # ML-20M's item count, DeepRecommender's 512-512-1024 encoder
        items, layers, batch, density = 27278, [512, 512, 1024], batch_size, 0.005
    model = autoencoder(items, layers, dropout=0.8).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)

    def loss() -> torch.Tensor:
        mask = (torch.rand(batch, items, device=device) < density).float()
        ratings = torch.randint(1, 6, (batch, items), device=device).float() * mask
        pred = model(ratings)
        # Masked MSE: only observed ratings count (DeepRecommender's MMSE loss).
        return ((pred - ratings) ** 2 * mask).sum() / mask.sum().clamp(min=1.0)

    return Trainer.of(model, opt, loss)


FAMILY = Family("Recommendation", (512, 1024, 2048, 4096, 8192), build)

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
