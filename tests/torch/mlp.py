"""The small training loop every torch test and the benchmark run: an MLP
(Linear/ReLU/LayerNorm), AdamW, forward/backward/step,
zero_grad(set_to_none=True). Device code never runs on the simulated
device, so nothing here looks at a value a kernel computed."""

from __future__ import annotations

import torch

IN, HIDDEN, OUT, BATCH = 256, 512, 64, 32


def make_model(device: str = "cuda") -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.LayerNorm(HIDDEN),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(), torch.nn.LayerNorm(HIDDEN),
        torch.nn.Linear(HIDDEN, OUT),
    ).to(device)


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int,
          device: str = "cuda") -> None:
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        x = torch.randn(BATCH, IN, device=device)
        y = torch.randn(BATCH, OUT, device=device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()


def block_bytes(nbytes: int) -> int:
    """What PyTorch's caching allocator reserves for one tensor: its size
    rounded up to 512 bytes (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize)."""
    return max(512, (nbytes + 511) // 512 * 512)


def param_block_bytes(model: torch.nn.Module) -> int:
    return sum(block_bytes(p.numel() * p.element_size()) for p in model.parameters())
