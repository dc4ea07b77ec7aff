"""A running total of the loss kept as a tensor (``running = running +
loss``): each step's autograd graph, with every activation it saved, stays
alive through the total's ``grad_fn`` (PyTorch keeps the graph for a second
backward: ``retain_graph=True``, as code that calls backward twice has it).
The fixed twin adds ``loss.item()``. The graph kept grows by a whole model's
worth of nodes per step, more than the walks' first 2,048 autograd steps,
and ReLU(inplace) saves its own output, so that each inner tensor's own
graph leads back to itself. The sigmoid's output is saved by its node
alone (the mean after it saves nothing): its Python object dies, and only
C++ keeps its storage.

Run as ``python running_total.py leak|fixed OUT.vtsnap``. Prints one JSON
line: the steps and the layers.
"""

from __future__ import annotations

import json
import sys

import torch

import vramtrace
import vramtrace.torch as vtt

STEPS, LAYERS, B, D = 14, 24, 16, 32


def main() -> None:
    fixed = sys.argv[1] == "fixed"
    torch.manual_seed(0)
    with vtt.track():
        layers = []
        for _ in range(LAYERS):
            layers += [torch.nn.Linear(D, D), torch.nn.BatchNorm1d(D), torch.nn.ReLU(inplace=True)]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(D, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        running = 0.0
        for i in range(STEPS):
            vtt.mark(f"step {i}")
            x = torch.randn(B, D)
            loss = model(x).sigmoid().mean()
            opt.zero_grad()
            loss.backward(retain_graph=not fixed)
            opt.step()
            if fixed:
                running = running + loss.item()
            else:
                running = running + loss   # RUNNING_LINE
            del loss, x
        vtt.mark("end")
        vramtrace.snapshot(sys.argv[2])
    print(json.dumps({"steps": STEPS, "layers": LAYERS}))


if __name__ == "__main__":
    main()
