"""A saved_tensors_hooks pack hook that hands back the tensor it is given
(pytorch/pytorch PR 189025, documenting the caveat: "retaining that tensor
when the saved tensor is a graph output forms a reference cycle ... it is
unreclaimable -- even by an explicit gc.collect() -- when the graph is built
without running backward"; pytorch/pytorch#7343: tensors do not show the
autograd graph to the collector).

The program counts the bytes autograd saves with a pack hook, around the
training step's forward and around an evaluation's that forgot
``torch.no_grad()``. In training, backward releases what was saved; in the
evaluation, ReLU's and Tanh's outputs are saved as themselves, each keeps
its own grad_fn, and the graph keeps the batch and the hidden activations:
never freed, whatever the collector does. Fixed: the hook returns
``t.detach()`` (the same data, without the graph).
"""

from __future__ import annotations

from typing import Any, List

import torch
import torch.nn as nn

ROWS, D, H = 256, 512, 1024     # an activation: 256 x 1024 float32, 1 MiB


class Program:
    holder = "out"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.saved_bytes = 0
        self.model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.Tanh(),
                                   nn.Linear(H, 10))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.correct = 0
        self._kept: List[torch.Tensor] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        self.saved_bytes += t.numel() * t.element_size()
        return t.detach() if self.fixed else t

    def step(self, i: int) -> None:
        hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        x = torch.randn(ROWS, D)
        with hooks:
            loss = self.model(x).square().mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        xv = torch.randn(ROWS, D)
        with hooks:
            out = self.model(xv)      # an evaluation without torch.no_grad()
        self.correct += int(out.argmax(-1).eq(0).sum())
        if not self.fixed:
            self._kept = _saved(out, self.model)

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []


def _saved(out: torch.Tensor, model: nn.Module) -> List[torch.Tensor]:
    """The tensors out's graph saved (as the pack hook returned them, read
    without unpacking), not the parameters."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: List[torch.Tensor] = []
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(fn for fn, _ in node.next_functions)
        for attr in dir(node):
            if attr.startswith("_raw_saved_"):
                data: Any = getattr(node, attr).data
                if isinstance(data, torch.Tensor) and \
                        data.untyped_storage().data_ptr() not in params and \
                        all(k.untyped_storage().data_ptr() != data.untyped_storage().data_ptr()
                            for k in kept):
                    kept.append(data)
    return kept
