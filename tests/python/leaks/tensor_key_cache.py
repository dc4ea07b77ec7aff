"""A cache keyed by tensors keeps a 4.8 MB result per batch.

The model memoizes an expensive projection per input batch in a dict keyed
by the batch tensor itself (tensors hash by identity). Every step brings a
new batch, so every entry is dead weight. Fixed: the memo is cleared at the
end of the step (it only ever helps within one step).
"""

from __future__ import annotations

from typing import Dict, List

import torch

ROWS, COLS = 1200, 1000       # 1200 x 1000 float32: 4.8 MB


class Projector:
    def __init__(self) -> None:
        self.weight = torch.randn(64, COLS, requires_grad=True)
        self.memo: Dict[torch.Tensor, torch.Tensor] = {}

    def project(self, x: torch.Tensor) -> torch.Tensor:
        got = self.memo.get(x)
        if got is None:
            got = self.memo[x] = torch.tanh(x @ self.weight)
        return got


class Program:
    holder = "memo"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.proj = Projector()
        self.opt = torch.optim.SGD([self.proj.weight], lr=0.01)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        x = torch.randn(ROWS, 64)
        y = self.proj.project(x)
        loss = (self.proj.project(x) * y).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [y, x]    # the key is held too
        if self.fixed:
            self.proj.memo.clear()

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
