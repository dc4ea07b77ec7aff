"""Training, then an evaluation at the end of the program that keeps each
batch's output: with its graph (no ``torch.no_grad()``, the output
appended as it is: every batch's activations stay) or, fixed, detached and
moved to the host (``out.detach().cpu()``, as tutorials keep logits).
The evaluation makes no optimizer step, so `vramtrace run` marks none
there: `check` judges the time after the last mark in steps of the run's
usual length (trace/check/check_clock.c). Knows nothing of vramtrace.

    eval_at_end.py leak|fixed
"""

import sys

import torch
from torch import nn

kind = sys.argv[1]
torch.manual_seed(0)
torch.backends.cudnn.enabled = False
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(10):
    loss = model(torch.randn(64, 256, device="cuda")).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
outputs = []
for _ in range(200):
    out = model(torch.randn(128, 256, device="cuda"))   # EVAL_LINE
    outputs.append(out if kind == "leak" else out.detach().cpu())
print("kept", len(outputs))
