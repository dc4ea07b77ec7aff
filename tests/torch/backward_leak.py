"""Gradients made by PyTorch's autograd engine thread, kept step after step.

  python backward_leak.py OUT.json SNAPSHOT [--steps N]

Each step retains the gradient of an intermediate (``h.retain_grad()``) and
appends it to a list that is never trimmed. That gradient is allocated
during backward, on the autograd engine's device thread, which runs no
Python code of the program: under ``vramtrace.torch.track()`` the
allocation is shown under the forward op it computes the gradient of
("forward of ..."), at the line that made ``h``. Run under
``PYTORCH_NO_CUDA_MEMORY_CACHING=1 vramtrace run``; writes the line of the
forward op in OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List

import torch

import vramtrace
import vramtrace.torch as vtt

ROWS, D = 128, 256
FORWARD_LINE = 0


def main() -> None:
    global FORWARD_LINE
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("snapshot")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    w = torch.randn(D, D, device="cuda", requires_grad=True)
    kept: List[torch.Tensor] = []
    with vtt.track() as tr:
        observer = tr._observer is not None   # the op observer, not the mode
        for step in range(args.steps):
            vtt.mark(f"step {step}")
            x = torch.randn(ROWS, D, device="cuda")
            FORWARD_LINE = _line() + 1
            h = torch.tanh(x @ w)
            h.retain_grad()
            h.square().sum().backward()
            kept.append(h.grad)               # the leak: every step's gradient
            with torch.no_grad():
                w -= 1e-3 * w.grad
            w.grad = None
            del x, h
        vtt.mark("end")
        vramtrace.snapshot(args.snapshot)
    with open(args.out, "w") as f:
        json.dump({"forward_line": FORWARD_LINE, "kept": len(kept),
                   "grad_bytes": ROWS * D * 4, "observer": observer}, f)


def _line() -> int:
    return sys._getframe(1).f_lineno


if __name__ == "__main__":
    main()
