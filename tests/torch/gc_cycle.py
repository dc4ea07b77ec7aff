"""A reference cycle that the garbage collector frees eventually, and its fix.

  python gc_cycle.py leak|fixed OUT.json SNAPSHOT [--steps N]

A training loop (a linear layer, Adam) where each step wraps its
activation in a context whose completion callback captures the context
itself (``ctx.on_done = lambda: ctx.finish()``: the context holds the
lambda, the lambda's closure holds the context). Nothing leaks for good:
the collector frees the contexts when it runs, here every third step (the
program has gc disabled and collects explicitly, as a long-lived program's
oldest generation is collected now and then). Until then every stashed
activation stays on the device. The fixed twin's callback takes the
context as an argument, so the context dies with the step. Run under
`PYTORCH_NO_CUDA_MEMORY_CACHING=1 vramtrace run`; prints what the program
stashed ([address, bytes] per step) in OUT.json.
"""

from __future__ import annotations

import gc
import json
from typing import Any, Callable, List, Optional

import torch

import vramtrace
import vramtrace.torch as vtt

from cycle_args import parse_cycle_args

ROWS, D = 256, 512


class StepContext:
    def __init__(self, act: torch.Tensor) -> None:
        self.act = act
        self.done = False
        self.on_done: Optional[Callable[[], Any]] = None

    def finish(self) -> None:
        self.done = True


def stash(act: torch.Tensor, leak: bool) -> StepContext:
    ctx = StepContext(act)
    if leak:
        ctx.on_done = lambda: ctx.finish()     # captures ctx: a cycle (LAMBDA_LINE)
    else:
        ctx.on_done = StepContext.finish       # takes ctx as argument
    return ctx


LAMBDA_LINE = stash.__code__.co_firstlineno + 3


def main() -> None:
    args = parse_cycle_args(default_steps=9)
    torch.manual_seed(0)
    gc.disable()
    stashed: List[List[Any]] = []
    model = torch.nn.Linear(D, D, device="cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # No time budget for the holder walk: the steps here are far shorter
    # than one pass over torch's heap, and the test wants the cycle named.
    with vtt.track(walk_fraction=None):
        for step in range(args.steps):
            vtt.mark(f"step {step}")
            x = torch.randn(ROWS, D, device="cuda")
            h = torch.relu(model(x))
            ctx = stash(h.detach().clone(), args.kind == "leak")
            st = ctx.act.untyped_storage()
            stashed.append([hex(st.data_ptr()), st.nbytes()])
            loss = h.square().mean() + ctx.act.sum() * 0
            opt.zero_grad()
            loss.backward()
            opt.step()
            del x, h, ctx, st, loss
            if step % 3 == 2:
                gc.collect()          # the collector runs, eventually
        vtt.mark("end")
        vramtrace.snapshot(args.snapshot)
    with open(args.out, "w") as f:
        json.dump({"stashed": stashed, "lambda_line": LAMBDA_LINE}, f)


if __name__ == "__main__":
    main()
