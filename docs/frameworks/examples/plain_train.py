"""A plain PyTorch loop under slurm-gavel (docs/frameworks/plain.md)."""

import os

import torch
from torch import nn

from slurm_gavel.job import GavelJob

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)

with GavelJob(model, optimizer, scheduler=scheduler) as job:  # resumes after a requeue
    # total steps: --gavel-steps (GAVEL_TOTAL_STEPS), else 100,000
    for step in job.steps(int(os.environ.get("GAVEL_TOTAL_STEPS", 100_000))):
        x = torch.randn(64, 32)
        loss = nn.functional.cross_entropy(model(x), x[:, :10].argmax(dim=1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 1000 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
