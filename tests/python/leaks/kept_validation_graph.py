"""A validation loss computed without ``torch.no_grad()`` and kept in a
history list (forum reports: "GPU memory grows during validation", "CUDA out
of memory after some epochs of evaluation"): each kept loss keeps its whole
forward graph, and with it every activation the graph saved, of every line
of the model. The model is a small attention block written as nanoGPT
writes it (q, k, v split from one projection, each a view of one buffer,
saved by the attention's node, and a hand-written activation's input kept by
ctx.save_for_backward). Fixed: the evaluation runs under
``no_grad()`` and the history keeps ``loss.item()``.
"""

from __future__ import annotations

from typing import List

import torch
from torch import nn
from torch.nn import functional as F

B, T, C, HEADS = 8, 64, 96, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_out = nn.Linear(4 * C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(self.ln(x)).split(C, dim=2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.c_out(Gelu.apply(self.c_fc(x)))


class Gelu(torch.autograd.Function):
    """A hand-written activation, as models fuse their own: it keeps its input
    with ctx.save_for_backward (not in a ``_saved_*`` attribute of its node)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            return torch.autograd.grad(F.gelu(x), x, g)[0]


class Program:
    holder = "history"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.model = nn.Sequential(Block(), Block())
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.history: List[object] = []
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        x, target = torch.randn(B, T, C), torch.randn(B, T, C)
        loss = F.mse_loss(self.model(x), target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        xv, tv = torch.randn(B, T, C), torch.randn(B, T, C)
        if self.fixed:
            with torch.no_grad():
                val = F.mse_loss(self.model(xv), tv)
            self.history.append(val.item())
        else:
            val = F.mse_loss(self.model(xv), tv)      # the graph is built and kept
            self.history.append(val)
            self._kept = _saved_activations(val, self.model)

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []


def _saved_activations(loss: torch.Tensor, model: nn.Module) -> List[torch.Tensor]:
    """What loss's graph keeps: the forward's tensors its nodes saved (not
    the parameters, not the few-element statistics)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    out: List[torch.Tensor] = []
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for attr in dir(node):
            if attr.startswith("_saved_") and not attr.endswith(("sizes", "strides")):
                try:
                    val = getattr(node, attr)
                except Exception:
                    continue
                for t in (val if isinstance(val, (list, tuple)) else (val,)):
                    if isinstance(t, torch.Tensor) and t.numel() > 1024 and \
                            t.untyped_storage().data_ptr() not in params:
                        out.append(t)
        todo.extend(n for n, _ in node.next_functions)
    return out
