"""A short training loop with an exponential moving average of its model
(``torch.optim.swa_utils.AveragedModel``, as EMA training scripts keep one),
the average evaluated every 5 steps on a validation batch. Its first mark
finds the average's parameters unused yet (they are first updated after
the optimizer's step), and their holders are deep: the parameter dict, the
layer, the Sequential's module dict, the AveragedModel, main's local.
``leak``: each evaluation's output kept with its graph (no ``no_grad()``)
in ``evals``, a local of main(); ``fixed``: its argmax on the host.
Prints "evaluations N" last."""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def main(leak: bool) -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    val = torch.randn(256, 256, device="cuda")
    evals = []
    for step in range(30):
        x = torch.randn(64, 256, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema.update_parameters(model)
        if step % 5 == 4:
            if leak:
                evals.append(ema(val))   # EVAL_LINE
            else:
                with torch.no_grad():
                    evals.append(ema(val).argmax(-1).cpu())
    return len(evals)


if __name__ == "__main__":
    print("evaluations", main(sys.argv[1] == "leak"))
