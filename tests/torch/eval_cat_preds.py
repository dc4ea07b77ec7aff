"""Training, then an evaluation in a function of its own over a validation
set already on the device, shaped as the classic report of an inference loop
that runs out of memory after a few dozen inputs, however small the batch,
until it is wrapped in torch.no_grad() (one such write-up:
https://openillumi.com/en/en-pytorch-cuda-oom-fix-no-grad; this program is
our own, not its code): leaking, it runs without torch.no_grad() and
gathers its predictions by concatenating each batch's output onto a running
tensor (`preds = torch.cat((preds, out))`), so every batch's graph, with
its activations, stays until the function's caller lets the result go;
fixed, under no_grad, the outputs gathered in a list and concatenated once
after the loop. Each batch's kept blocks are made under one line of the
loop (`out = model(x)`). Knows nothing of vramtrace.

    eval_cat_preds.py leak|fixed
"""

import sys

import torch
from torch import nn


def evaluate(model, batches, kind):
    model.eval()
    if kind == "leak":
        preds = torch.zeros(0, 10, device="cuda")
        for x in batches:
            out = model(x)   # EVAL_LINE
            preds = torch.cat((preds, out))
        return preds
    outs = []
    with torch.no_grad():
        for x in batches:
            outs.append(model(x))
    return torch.cat(outs)


def main(kind):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(10):
        loss = model(torch.randn(64, 256, device="cuda")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    batches = [torch.randn(64, 256, device="cuda") for _ in range(20)]
    preds = evaluate(model, batches, kind)   # EVAL_CALL
    print("evaluated", tuple(preds.shape), "accuracy", float((preds.argmax(1) == 0).float().mean()))


main(sys.argv[1])
