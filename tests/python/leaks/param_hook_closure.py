"""A gradient hook registered on a parameter at every step keeps every
step's mask (forum reports: "memory leak when calling register_hook inside
the training loop").

``self.w.register_hook(lambda g: g * mask)`` adds one more hook to the
parameter each step; the parameter lives for the whole run, and each hook's
closure keeps its step's 1.2 MB mask. Fixed: the hook's handle is removed
once backward has used it.
"""

from __future__ import annotations

from typing import List

import torch

ROWS, D = 128, 64
MASK = (D, 4800)                  # a mask per step: 64 x 4800 float32, 1.2 MB


class Program:
    holder = "mask"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.w = torch.randn(*MASK, requires_grad=True)
        self.opt = torch.optim.SGD([self.w], lr=0.01)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        mask = (torch.rand(*MASK) > 0.1).float()
        handle = self.w.register_hook(lambda g: g * mask)
        x = torch.randn(ROWS, D)
        loss = (x @ self.w).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if self.fixed:
            handle.remove()
        self._kept = [mask]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
