"""submitit under slurm-gavel (docs/frameworks/submitit.md). Run on the login node:

python submitit_launch.py
"""

import submitit
import torch
from torch import nn

from slurm_gavel.job.submitit import GavelCheckpointable, gavel_executor_parameters


class Train(GavelCheckpointable):
    """Called in the job; after a checkpoint-and-requeue, called again on the saved self."""

    def __init__(self) -> None:
        self.step = 0
        self.model_state = None  # plain state dicts pickle well; live modules need not

    def __call__(self, total: int) -> float:
        torch.manual_seed(self.step)
        model = nn.Linear(32, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        if self.model_state is not None:
            model.load_state_dict(self.model_state)
        self.model = model
        while self.step < total:
            x = torch.randn(64, 32)
            loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            self.step += 1
        return float(loss)

    def checkpoint(self, total: int) -> submitit.helpers.DelayedSubmission:
        # runs in the signal handler: keep what the next call needs, drop the rest
        self.model_state = self.model.state_dict()
        del self.model
        return super().checkpoint(total)


executor = submitit.AutoExecutor(folder="submitit-runs")
executor.update_parameters(
    timeout_min=600,
    **gavel_executor_parameters(job_type="ResNet-18 (batch size 32)", gpus=1),
)
job = executor.submit(Train(), 200_000)
print("submitted", job.job_id)
