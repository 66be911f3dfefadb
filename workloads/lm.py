"""LSTM word language model (PyTorch's word_language_model, Wikitext-2 in Gavel's LM
workload) on synthetic token streams."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.trainer import Family, Trainer, main


class LSTMLM(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.emb = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, layers, dropout=dropout, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.drop(self.emb(x)))
        return self.out(self.drop(h))


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    if tiny:
        vocab, emb, hidden, layers, bptt, batch = 100, 16, 16, 2, 8, min(batch_size, 4)
    else:  # Wikitext-2's vocabulary, the example's "medium" model, bptt 35
        vocab, emb, hidden, layers, bptt, batch = 33278, 650, 650, 2, 35, batch_size
    model = LSTMLM(vocab, emb, hidden, layers, dropout=0.5).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=20.0)

    def loss() -> torch.Tensor:
        # Fresh hidden state every step: carrying it over would be state the
        # checkpoint does not hold, and resumed runs would then differ.
        tokens = torch.randint(0, vocab, (batch, bptt + 1), device=device)
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))

    return Trainer.of(model, opt, loss, clip=0.25)


FAMILY = Family("LM", (5, 10, 20, 40, 80), build)

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
