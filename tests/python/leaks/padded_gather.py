"""A padded all-gather buffer pinned by a true-shape view (DeepSpeed ZeRO-3).

Each step a partitioned weight is gathered into a buffer padded to the
world size, and the weight's true shape is a view into it. The views of
gathered weights are remembered in a dict keyed by the view tensor itself
(the "in flight" set). The leak: dropping the padded buffer does not free
it, since the view keeps its whole storage. Fixed, as DeepSpeed does:
``view.untyped_storage().resize_(0)`` after use releases the memory while
the (now empty) tensor stays in the set.
"""

from __future__ import annotations

from typing import Dict, List

import torch

WORLD = 8
ROWS, D = 300, 250            # true shape; padded to a multiple of WORLD * 1024


class Gatherer:
    def __init__(self) -> None:
        self.shard = torch.randn((ROWS * D + WORLD - 1) // WORLD)
        self.inflight: Dict[torch.Tensor, int] = {}

    def gather(self, step: int) -> torch.Tensor:
        numel = ROWS * D
        padded_numel = -(-numel // (WORLD * 1024)) * WORLD * 1024
        padded = torch.empty(padded_numel)
        for r in range(WORLD):            # the "all-gather"
            padded[r * self.shard.numel():(r + 1) * self.shard.numel()].copy_(self.shard)
        view = padded.narrow(0, 0, numel).view(ROWS, D)
        self.inflight[view] = step
        return view

    def release(self, view: torch.Tensor, free: bool) -> None:
        if free:
            view.untyped_storage().resize_(0)


class Program:
    holder = "inflight"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.g = Gatherer()
        self.head = torch.randn(D, 16, requires_grad=True)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        w = self.g.gather(i)
        x = torch.randn(64, ROWS)
        loss = ((x @ w) @ self.head).square().mean()
        loss.backward()
        with torch.no_grad():
            self.head -= 0.01 * self.head.grad
        self.head.grad = None
        self._kept = [w]
        self.g.release(w, self.fixed)

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
