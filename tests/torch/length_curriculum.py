"""A small language model trained on batches sorted by length, shortest
first (a length curriculum, fairseq-style sorted batches, one epoch): each
step's logits stay bound to the loop's `logits` across the step's end, each
larger than the last. ``fixed``: only that, no leak. ``leak``: the last
positions' logits kept besides in one tensor rebuilt larger every step
(``kept = torch.cat([kept, ...])``), which is one. Prints "steps N" last.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

V, D = 512, 64


class LM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.mix = torch.nn.Linear(D, D)
        self.head = torch.nn.Linear(D, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mix(self.emb(x))))


def main(kind: str) -> None:
    torch.manual_seed(0)
    model = LM().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept = torch.zeros(0, device="cuda")
    lengths = [16 + 8 * i for i in range(24)]   # 16 .. 200, ascending
    for T in lengths:
        x = torch.randint(0, V, (8, T), device="cuda")
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, V), x.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if kind == "leak":
            kept = torch.cat([kept, logits.detach()[:, -4:].flatten()])
    print("steps", len(lengths))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixed")
