"""A3C (Mnih et al. 2016; Atari Pong in Gavel's A3C workload): one worker's actor-critic
update over a rollout of synthetic 42x42 frames. A step is one rollout + update."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.trainer import Family, Trainer, main


class ActorCritic(nn.Module):
    def __init__(self, channels: int, hidden: int, actions: int) -> None:
        super().__init__()
        convs: list[nn.Module] = []
        cin = 1
        for _ in range(4):  # 42 -> 21 -> 11 -> 6 -> 3
            convs += [nn.Conv2d(cin, channels, 3, 2, 1), nn.ELU()]
            cin = channels
        self.features = nn.Sequential(*convs, nn.Flatten())
        self.lstm = nn.LSTMCell(channels * 3 * 3, hidden)
        self.actor = nn.Linear(hidden, actions)
        self.critic = nn.Linear(hidden, 1)

    def forward(
        self, x: torch.Tensor, hc: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        h, c = self.lstm(self.features(x), hc)
        return self.actor(h), self.critic(h), (h, c)


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    channels, hidden, rollout = (4, 16, 4) if tiny else (32, 256, 20)
    actions, gamma, tau = 6, 0.99, 1.0
    model = ActorCritic(channels, hidden, actions).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loss() -> torch.Tensor:
        hc = (torch.zeros(1, hidden, device=device), torch.zeros(1, hidden, device=device))
        logps, values, entropies, rewards = [], [], [], []
        for _ in range(rollout):
            obs = torch.rand(1, 1, 42, 42).to(device)
            logits, value, hc = model(obs, hc)
            prob, logp = F.softmax(logits, -1), F.log_softmax(logits, -1)
            action = torch.multinomial(prob.cpu(), 1).to(device)
            logps.append(logp.gather(1, action))
            values.append(value)
            entropies.append(-(logp * prob).sum(1, keepdim=True))
            rewards.append(float(torch.randint(-1, 2, ()).item()))
        ret = torch.zeros(1, 1, device=device)
        gae = torch.zeros(1, 1, device=device)
        next_value = ret
        policy_loss = value_loss = torch.zeros(1, 1, device=device)
        for i in reversed(range(rollout)):
            ret = gamma * ret + rewards[i]
            value_loss = value_loss + 0.5 * (ret - values[i]).pow(2)
            delta = rewards[i] + gamma * next_value - values[i].detach()
            gae = gae * gamma * tau + delta
            policy_loss = policy_loss - logps[i] * gae - 0.01 * entropies[i]
            next_value = values[i].detach()
        return (policy_loss + 0.5 * value_loss).sum()

    return Trainer.of(model, opt, loss, clip=50.0)


FAMILY = Family("A3C", (1,), build, fixed_type="A3C")

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
