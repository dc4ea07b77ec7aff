"""A few rows of each batch's output kept to look at later, as slices
(pytorch/examples' VAE, with its reconstructions kept step by step for a
figure after training: ``recons.append(recon_batch[:8].detach())``). The
slice's ``detach()`` is no view to PyTorch (no ``_base``): the batch's
output is dropped, but its whole storage stays allocated for the 8 rows
kept, a step's worth of memory per step (forum reports: "memory grows when
I keep a few samples", "slicing does not free the tensor"). Fixed, as the
example itself does (one figure of the latest batch): the latest rows only,
copied (``.clone()``), so each batch's buffer is freed with its batch.
"""

from __future__ import annotations

from typing import List

import torch
from torch import nn
from torch.nn import functional as F

BATCH, PIXELS, HIDDEN, LATENT, KEEP = 64, 784, 200, 20, 8


class VAE(nn.Module):
    """The example's model, smaller."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(PIXELS, HIDDEN)
        self.fc21 = nn.Linear(HIDDEN, LATENT)
        self.fc22 = nn.Linear(HIDDEN, LATENT)
        self.fc3 = nn.Linear(LATENT, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, PIXELS)

    def forward(self, x: torch.Tensor):
        h1 = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h1), self.fc22(h1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


class Program:
    holder = "recons"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.model = VAE()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.recons: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        data = torch.rand(BATCH, PIXELS)
        self.opt.zero_grad()
        recon, mu, logvar = self.model(data)
        bce = F.binary_cross_entropy(recon, data, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        (bce + kld).backward()
        self.opt.step()
        kept = recon[:KEEP].detach()
        if self.fixed:
            self.recons = [kept.clone()]
        else:
            self.recons.append(kept)

    def retained(self) -> List[torch.Tensor]:
        return [self.recons[-1]]

    def forget_step(self) -> None:
        pass
