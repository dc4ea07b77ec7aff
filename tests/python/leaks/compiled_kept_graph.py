"""A torch.compile'd model (backend aot_eager) whose losses are kept with their
graphs: its backward is an autograd.Function whose tensors live in
ctx.save_for_backward, and its graphs run as torch.fx's generated code
(<eval_with_key>.N). Fixed: the losses are kept as numbers."""

from __future__ import annotations

from typing import List

import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))).square().mean()


class Program:
    holder = "history"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.net = torch.compile(Net(), backend="aot_eager")
        self.history: List[object] = []

    def step(self, i: int) -> None:
        loss = self.net(torch.randn(128, 64))
        self.history.append(loss.item() if self.fixed else loss)   # kept with its graph

    def retained(self) -> List[torch.Tensor]:
        return []

    def forget_step(self) -> None:
        pass
