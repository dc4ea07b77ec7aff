"""What the torchrun programs ranks.py, ranks_growth.py and ranks_stage.py
share: joining the job (gloo) on the rank's own device, the small model
they train, a training step, and a loss summed over the ranks. Never
imports vramtrace."""

from __future__ import annotations

from typing import Tuple

import torch
import torch.distributed as dist


def join_on_own_device() -> int:
    """This process's rank in the job torchrun started (gloo); its CUDA
    device is the one of the same number."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    return rank


def model_and_optimizer() -> Tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A 64x64 linear layer on the device and its SGD (lr 0.1)."""
    model = torch.nn.Linear(64, 64).cuda()
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(loss: torch.Tensor, opt: torch.optim.Optimizer) -> None:
    """loss's backward, then the optimizer's step; the gradients let go."""
    loss.backward()
    opt.step()
    opt.zero_grad()


def summed_over_ranks(value: float) -> torch.Tensor:
    """value all-reduced (summed) over the job's ranks, as a host tensor."""
    total = torch.tensor([value])
    dist.all_reduce(total)
    return total
