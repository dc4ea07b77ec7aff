"""A CUDA test that keeps a 4-byte result, alone in its session: far under
`vramtrace check`'s floor of minor findings (0.1 % of the peak, which the
matmul's cuBLAS workspaces make tens of MiB), still the test's leak."""

import torch

SMALL = []


def test_cuda_small_leak():
    x = torch.randn(256, 256, device="cuda")
    y = x @ x
    SMALL.append(y.sum())                                # CUDA_SMALL_LEAK_LINE
