"""Training with an evaluation every 10 steps whose result is kept until
the next one, as karpathy/ng-video-lecture's gpt.py keeps `losses =
estimate_loss()`: leaking, the evaluation runs without torch.no_grad() and
stores each batch's loss as a tensor (`losses[k] = loss`), so the result
holds every evaluation forward's graph, activations and all, until the next
evaluation replaces it; fixed, under no_grad with `loss.item()`. Marked by
its optimizer steps under `vramtrace run`. Knows nothing of vramtrace.

    eval_kept_graph.py leak|fixed
"""

import sys

import torch
from torch import nn

kind = sys.argv[1]
torch.manual_seed(0)
torch.backends.cudnn.enabled = False
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def estimate_loss():
    losses = torch.zeros(4, device="cuda")
    for k in range(4):
        loss = model(torch.randn(128, 256, device="cuda")).square().mean()   # EVAL_LINE
        losses[k] = loss if kind == "leak" else loss.item()
    return losses.mean()


def evaluate():
    if kind == "leak":
        return estimate_loss()
    with torch.no_grad():
        return estimate_loss()


val = None
for step in range(60):
    if step % 10 == 0:
        val = evaluate()
    loss = model(torch.randn(64, 256, device="cuda")).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("steps", step + 1, "val", float(val))
