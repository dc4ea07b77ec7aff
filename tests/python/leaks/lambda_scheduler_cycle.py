"""A learning-rate lambda that captures the trainer keeps every old trainer
(reports: "LambdaLR lambda referencing self creates a reference cycle, model
not freed"; cross-validation and hyper-parameter sweeps build a trainer per
fold).

``LambdaLR(opt, lambda s: self.warmup(s))`` closes over ``self``: trainer ->
scheduler -> lr_lambdas -> lambda -> trainer. When the loop moves on to the
next fold, reference counting cannot free the old trainer, its model or its
optimizer's state; only the garbage collector can, and this job holds it back.
Fixed: the lambda captures only the number it needs (``warm``), so the
trainer is freed when the loop drops it.
"""

from __future__ import annotations

from typing import List

import torch
from torch import nn


# torch keeps the frames of the first optimizer it builds (an exception's
# traceback, cached while it imports its compiler on first use) until the
# garbage collector runs: built once here, before the program is tracked, so
# that only the program's own cycles are in the run.
torch.optim.Adam([torch.zeros(1, requires_grad=True)])

D = 400                       # a fold's model: 400 x 400 float32, 640 KB


class Trainer:
    def __init__(self, fixed: bool) -> None:
        self.model = nn.Linear(D, D)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.warm = 3
        if fixed:
            warm = self.warm
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                self.opt, lambda s: min(1.0, (s + 1) / warm))
        else:
            self.sched = torch.optim.lr_scheduler.LambdaLR(
                self.opt, lambda s: self.warmup(s))

    def warmup(self, s: int) -> float:
        return min(1.0, (s + 1) / self.warm)

    def fit(self) -> None:
        for _ in range(2):
            x = torch.randn(64, D)
            loss = self.model(x).square().mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.sched.step()


class Program:
    holder = "lr_lambdas"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.trainer: Trainer | None = None
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        self.trainer = Trainer(self.fixed)      # a new fold drops the last one
        self.trainer.fit()
        self._kept = [self.trainer.model.weight]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
