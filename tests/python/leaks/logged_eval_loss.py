"""An evaluation loss logged lazily, ``log.info("val loss %s", val)``, by a
logger whose handler buffers its records (reports: "memory grows when
logging the loss", logging a tensor instead of ``loss.item()``; the same
happens under pytest's log capture, which keeps every record of a test): a
LogRecord keeps its ``args`` until the handler lets it go, and the loss in
them keeps its forward graph, computed without ``no_grad()``, with every
activation the graph saved. The holder is the logging module's, not the
program's: the logger's handler's buffer. Fixed: the record gets
``val.item()`` (and the evaluation runs under ``no_grad()``).
"""

from __future__ import annotations

import logging
import logging.handlers
from typing import List

import torch
from torch import nn
from torch.nn import functional as F

from kept_validation_graph import _saved_activations

B, D, H = 64, 128, 512

log = logging.getLogger("train")
log.setLevel(logging.INFO)
log.propagate = False
# a buffer the program flushes to its target on an error only (none comes)
log.addHandler(logging.handlers.MemoryHandler(capacity=100_000, flushLevel=logging.ERROR))


class Program:
    holder = "MemoryHandler.buffer"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.model = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, H), nn.GELU(),
                                   nn.Linear(H, 1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-2)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        x, y = torch.randn(B, D), torch.randn(B, 1)
        loss = F.mse_loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        xv, yv = torch.randn(B, D), torch.randn(B, 1)
        if self.fixed:
            with torch.no_grad():
                val = F.mse_loss(self.model(xv), yv)
            log.info("step %d val loss %s", i, val.item())
        else:
            val = F.mse_loss(self.model(xv), yv)      # its graph is built, and logged
            log.info("step %d val loss %s", i, val)
            self._kept = _saved_activations(val, self.model)

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
