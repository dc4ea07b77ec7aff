"""The optimizer keeps the parameters (and their Adam state) of every head
the model replaced (reports: "memory leak when re-initializing a layer: the
optimizer still references the old parameters"; continual and multi-task
training swap the classifier head per task).

Each task gives the model a new head and adds its parameters to the running
optimizer as a new param group; the old head's weight, gradient and
``exp_avg``/``exp_avg_sq`` stay in ``param_groups`` and ``state``. Fixed: the
old head's group is taken out of the optimizer (and its state dropped) when
the head is replaced.
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

D, H = 64, 4800                   # a head: 4800 x 64 float32, 1.2 MB


class Program:
    holder = "param_groups"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.body = nn.Linear(D, D)
        self.head = nn.Linear(D, H, bias=False)
        self.opt = torch.optim.Adam([{"params": self.body.parameters()},
                                     {"params": self.head.parameters()}], lr=1e-3)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        old = self.head
        self.head = nn.Linear(D, H, bias=False)       # the next task's head
        if self.fixed:
            self.opt.param_groups = [g for g in self.opt.param_groups
                                     if not any(p is old.weight for p in g["params"])]
            self.opt.state.pop(old.weight, None)
        self.opt.add_param_group({"params": self.head.parameters()})
        x = torch.randn(32, D)
        loss = self.head(torch.relu(self.body(x))).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [self.head.weight]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
