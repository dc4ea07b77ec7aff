"""An attention mask cached per sequence length with ``functools.lru_cache``
(reports: "memory keeps growing with variable sequence lengths", rotary and
mask caches keyed by length; "lru_cache on a method leaks").

A model builds its causal mask through a cached function so that it is made
once per length; batches are padded to each batch's longest sequence, so the
lengths vary and every new one adds a mask the unbounded cache keeps for the
rest of the run (about 300 KiB each here, tens of MiB at a real model's
lengths). Fixed: the cache keeps the latest mask only (``maxsize=1``).
"""

from __future__ import annotations

import functools
from typing import List

import torch
from torch import nn

D = 32


def causal_mask(n: int, device: torch.device) -> torch.Tensor:
    return torch.full((n, n), float("-inf"), device=device).triu(1)


class Attention(nn.Module):
    def __init__(self, mask_of) -> None:
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.mask_of = mask_of

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / D ** 0.5 + self.mask_of(x.shape[1], x.device)
        return scores.softmax(-1) @ v


class Program:
    holder = "mask"

    def __init__(self, fixed: bool) -> None:
        self.mask = functools.lru_cache(maxsize=1 if fixed else None)(causal_mask)
        self.net = Attention(self.mask)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        n = 256 + 24 * (i * 5 % 7)   # this batch's longest sequence: 256 to 400
        x = torch.randn(2, n, D)
        loss = self.net(x).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [self.mask(n, x.device)]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
