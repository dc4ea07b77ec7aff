"""A custom autograd.Function keeps its output on ``ctx`` (PyTorch's docs on
extending autograd: save outputs with ``save_for_backward``, or the output and
its graph form a reference cycle; reported again and again as "memory leak in
custom Function").

``ctx.out = out`` makes out -> grad_fn (the Function's node, whose ctx it is)
-> out: reference counting never frees either, only the garbage collector,
and a training loop that runs with the collector held back (as large jobs do:
gc.disable() or a high threshold) keeps every step's output. Fixed:
``ctx.save_for_backward(out)``, which autograd holds without a cycle.
"""

from __future__ import annotations

from typing import Any, List

import torch

ROWS, D = 1024, 300           # the kept output: 1024 x 300 float32, 1.2 MB


class Gelu(torch.autograd.Function):
    fixed = False

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = x * torch.sigmoid(1.702 * x)
        if Gelu.fixed:
            ctx.save_for_backward(x, out)
        else:
            ctx.x, ctx.out = x, out
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, out = ctx.saved_tensors if Gelu.fixed else (ctx.x, ctx.out)
        s = torch.sigmoid(1.702 * x)
        return g * (s + out * 1.702 * (1 - s))


class Program:
    holder = "out"

    def __init__(self, fixed: bool) -> None:
        Gelu.fixed = fixed
        self.w = torch.randn(64, D, requires_grad=True)
        self.opt = torch.optim.SGD([self.w], lr=0.01)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        x = torch.randn(ROWS, 64)
        y = Gelu.apply(x @ self.w)
        loss = y.mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [y]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
