"""nanoGPT's estimate_loss() with its ``@torch.no_grad()`` left out and each
evaluation loss kept in a module-level list for a plot (found on nanoGPT's
own train.py): every kept loss keeps its forward graph and the activations
the graph saved, thousands of tensors by the end, all of them past their
last use. The holder walk at the snapshot starts from each of them: more
than its bound of holders (max_nodes), which once counted the starts too
and then found no holder at all (the chains stopped at the loss tensor),
and more than ``gc.get_referrers`` looks for in one heap pass within the
snapshot's budget.

``python kept_eval_graphs.py leak|fixed``: fixed, the evaluation runs under
``no_grad()`` and the list keeps ``loss.item()``. Prints the list's length
and memory_allocated() after each evaluation.
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F

kind = sys.argv[1]
torch.manual_seed(0)
WIDTH, DEPTH, EVAL_ITERS = 32, 24, 4
model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.LayerNorm(WIDTH))
                        for _ in range(DEPTH)], nn.Linear(WIDTH, 16)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_curve = []   # every evaluation loss, for a plot at the end


def batch():
    return torch.randn(8, WIDTH, device="cuda"), torch.randint(0, 16, (8,), device="cuda")


def estimate_loss():
    model.eval()
    losses = torch.zeros(EVAL_ITERS)
    for k in range(EVAL_ITERS):
        x, y = batch()
        loss = F.cross_entropy(model(x), y)   # EVAL_LINE
        losses[k] = loss.item()
        loss_curve.append(loss if kind == "leak" else loss.item())
    model.train()
    return losses.mean()


if kind == "fixed":
    estimate_loss = torch.no_grad()(estimate_loss)

for step in range(20):
    if step % 2 == 0:
        estimate_loss()
        print(f"eval {step}: kept {len(loss_curve)}, allocated {torch.cuda.memory_allocated()}")
    x, y = batch()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
