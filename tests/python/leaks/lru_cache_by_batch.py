"""An attention mask cached with the decorator's default ``functools.lru_cache``
(at most 128 entries) and keyed by the batch tensor itself (reports:
fastestimator's "unwanted memory stickiness that comes from lru cache",
PR #1234; PyTorch's sparse triton ops keyed an lru_cache by index tensors
until PR #112076 held them weakly; botorch's "don't use lru_cache on
methods", PR #1650).

Tensors hash by identity, so every batch is a new key: the cache keeps each
batch's tokens (in its key) and its mask (its result) until 128 more have
come, far past their step. The bounded cache keeps its entries in a linked
list no attribute reaches, unlike the unbounded one of lru_cache_masks.py.
Fixed: the cache is keyed by the batch's length, which repeats.
"""

from __future__ import annotations

import functools
from typing import List

import torch
from torch import nn

D, VOCAB, ROWS, LENGTH = 32, 100, 8, 192


@functools.lru_cache
def padding_mask(tokens: torch.Tensor) -> torch.Tensor:
    keep = tokens != 0
    return keep.unsqueeze(1) & keep.unsqueeze(2)


@functools.lru_cache
def full_mask(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool)


class Program:
    holder = "padding_mask"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.emb = nn.Embedding(VOCAB, D)
        self.opt = torch.optim.SGD(self.emb.parameters(), lr=0.01)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        tokens = torch.randint(1, VOCAB, (ROWS, LENGTH))
        mask = full_mask(LENGTH) if self.fixed else padding_mask(tokens)
        h = self.emb(tokens)
        scores = (h @ h.transpose(1, 2)).masked_fill(~mask, float("-inf"))
        loss = scores.softmax(-1).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [mask] if self.fixed else [mask, tokens]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
