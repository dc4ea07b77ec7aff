"""A pipeline stage keeps its micro-batch contexts; outputs are deallocated
Megatron-style in both twins.

Each micro-batch: the stage computes its output, "sends" it (a copy that the
next stage owns), then frees the output's memory while keeping the tensor
object for backward: ``out.data = torch.empty(1)`` (Megatron-LM's
deallocate_output_tensor; backward then runs through the engine directly,
as Megatron's custom_backward does, since the output no longer has its
shape). The leak: the stage's list of contexts is never trimmed, so every
micro-batch's input stays alive, and with it the gradient the backward
left in its ``.grad`` (the output is dropped after its backward,
as Megatron's schedule does). Fixed: a context is popped after its backward. The deallocated outputs are clean in both twins: their memory
went back to the allocator at the ``.data`` assignment, and the allocator
hands those addresses to the next micro-batch.
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch

MICRO = 4
ROWS, D = 256, 128


def deallocate_output_tensor(out: torch.Tensor) -> None:
    out.data = torch.empty((1,), device=out.device, dtype=out.dtype)


def custom_backward(output: torch.Tensor, grad_output: torch.Tensor) -> None:
    torch.autograd.Variable._execution_engine.run_backward(
        tensors=(output,), grad_tensors=(grad_output,), keep_graph=False,
        create_graph=False, inputs=(), allow_unreachable=True, accumulate_grad=True)


class Stage:
    def __init__(self) -> None:
        self.w1 = torch.randn(D, D, requires_grad=True)
        self.w2 = torch.randn(D, D, requires_grad=True)
        self.contexts: List[Dict[str, Any]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        out = torch.relu(x @ self.w1) @ self.w2
        with torch.no_grad():
            sent = out.clone()               # what the next stage receives
        deallocate_output_tensor(out)
        self.contexts.append({"input": x, "output": out})
        return sent

    def backward(self, k: int, grad: torch.Tensor) -> None:
        ctx = self.contexts[k]
        custom_backward(ctx.pop("output"), grad)   # as Megatron's schedule drops it


class Program:
    holder = "contexts"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.stage = Stage()
        self.opt = torch.optim.SGD([self.stage.w1, self.stage.w2], lr=1e-4)
        self._kept: List[torch.Tensor] = []

    def step(self, i: int) -> None:
        batch = torch.randn(MICRO * ROWS, D)
        first = len(self.stage.contexts)
        grads = []
        for m in range(MICRO):
            recv = self.stage.forward(batch[m * ROWS:(m + 1) * ROWS]).requires_grad_()
            (recv.square().mean()).backward()     # the next stage's loss
            grads.append(recv.grad)
        self.opt.zero_grad()
        for m in range(MICRO):
            self.stage.backward(first + m, grads[m])
        self.opt.step()
        ctxs = self.stage.contexts[first:]
        # each input keeps its gradient too (input.grad, from the backward)
        self._kept = [c["input"] for c in ctxs] + [c["input"].grad for c in ctxs]
        if self.fixed:
            del self.stage.contexts[first:]

    def retained(self) -> List[torch.Tensor]:
        return self._kept

    def forget_step(self) -> None:
        self._kept = []
