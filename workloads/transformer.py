"""Transformer translation model (Vaswani et al.) on synthetic token pairs (Gavel's
Transformer workload, trained on Multi30k there)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.trainer import Family, Trainer, main


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, ff: int, max_len: int):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, d)
        self.tgt_emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.core = nn.Transformer(d, heads, layers, layers, ff, dropout=0.1, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        n = tgt.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tgt.device)
        s = self.src_emb(src) + self.pos[: src.shape[1]]
        t = self.tgt_emb(tgt) + self.pos[:n]
        return self.out(self.core(s, t, tgt_mask=mask))


def build(batch_size: int, tiny: bool, device: torch.device) -> Trainer:
    if tiny:
        vocab, d, heads, layers, ff, seq, batch = 50, 16, 2, 1, 32, 6, min(batch_size, 4)
    else:
        vocab, d, heads, layers, ff, seq, batch = 10000, 512, 8, 6, 2048, 30, batch_size
    model = Seq2Seq(vocab, d, heads, layers, ff, seq + 1).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def loss() -> torch.Tensor:
        src = torch.randint(0, vocab, (batch, seq), device=device)
        tgt = torch.randint(0, vocab, (batch, seq + 1), device=device)
        logits = model(src, tgt[:, :-1])
        return F.cross_entropy(logits.reshape(-1, vocab), tgt[:, 1:].reshape(-1))

    return Trainer.of(model, opt, loss)


FAMILY = Family("Transformer", (16, 32, 64, 128, 256), build)

if __name__ == "__main__":
    raise SystemExit(main(family=FAMILY))
