"""CUDA tensors under the leak gate: their blocks come from PyTorch's own
caching allocator, which the plugin observes (as `vramtrace run` does)."""

import torch

KEPT = []


def test_cuda_cache_leak():
    x = torch.randn(256, 256, device="cuda")
    KEPT.append(x @ x)                                   # CUDA_LEAK_LINE


def test_cuda_clean():
    x = torch.randn(256, 256, device="cuda")
    assert (x @ x).shape == (256, 256)
