"""Example suite for the plugin's vramtrace_limit marker (host tensors)."""

import pytest
import torch


@pytest.mark.vramtrace_limit("1 MiB")
def test_under_limit():
    x = torch.zeros(64 * 1024)          # 256 KiB
    assert float(x.sum()) == 0


@pytest.mark.vramtrace_limit("1 MiB")
def test_over_limit():
    x = torch.zeros(512 * 1024)         # 2 MiB  OVER_LINE
    assert float(x.sum()) == 0
