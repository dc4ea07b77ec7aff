"""A forward hook stashes every batch's features (forum reports: "memory
grows with register_forward_hook").

Feature-extraction code registers a hook on an inner layer and appends what
it sees to a list, meaning to look at the last batch only; the list is never
emptied, so every step's 1.2 MB activation stays (the hook's output is part
of the graph: kept without ``detach()`` it keeps nothing more than itself,
since backward frees what autograd saved). Fixed: the hook keeps only the
latest batch (``self.features[:] = [output.detach()]``).
"""

from __future__ import annotations

from typing import Any, List

import torch
from torch import nn

ROWS, D, H = 512, 64, 600        # the stashed activation: 512 x 600 float32


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(D, H)
        self.act = nn.ReLU()
        self.head = nn.Linear(H, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.body(x)))


class Program:
    holder = "features"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.net = Net()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.features: List[torch.Tensor] = []
        self.net.act.register_forward_hook(self._stash)
        self._kept: List[torch.Tensor] = []

    def _stash(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        if self.fixed:
            self.features[:] = [output.detach()]
        else:
            self.features.append(output)

    def step(self, i: int) -> None:
        x = torch.randn(ROWS, D)
        loss = self.net(x).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [self.features[-1]]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
