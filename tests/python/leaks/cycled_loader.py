"""An endless training run over a DataLoader through ``itertools.cycle``
(reports: bytedance/UNO#64, "GPU memory leak when using
itertools.cycle(dataloader)"; pytorch/pytorch#23900; cgtuebingen/SSS-GS#6).

``cycle`` saves every item of its first pass over the loader so that it can
repeat them; a loader reshuffles and remakes its batches at each epoch, so
what it saves is a copy of the whole epoch's batches, kept for the rest of
the run, each used in its one step. Fixed: a generator that iterates the
loader again at each epoch.
"""

from __future__ import annotations

import itertools
from typing import Iterator, List

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

D, ROWS = 64, 256


def forever(loader: DataLoader) -> Iterator:
    while True:
        yield from loader


class Program:
    holder = "batches"

    def __init__(self, fixed: bool) -> None:
        data = TensorDataset(torch.randn(64 * ROWS, D), torch.randn(64 * ROWS, 1))
        loader = DataLoader(data, batch_size=ROWS, shuffle=True)
        self.batches = forever(loader) if fixed else itertools.cycle(loader)
        self.net = nn.Sequential(nn.Linear(D, 128), nn.ReLU(), nn.Linear(128, 1))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        x, y = next(self.batches)
        loss = nn.functional.mse_loss(self.net(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self._kept = [x, y]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
