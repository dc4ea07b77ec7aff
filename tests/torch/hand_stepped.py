"""Training that steps its parameters by hand (no optimizer: `p.data.add_(
p.grad, alpha=-lr)`, as pytorch/examples' word_language_model does by
default), with an evaluation every 10 steps: leaking, the evaluation runs
without torch.no_grad() and sums its batches' losses as a tensor (`total
+= loss`), which chains every batch's graph, activations and all, until
evaluate() returns (val_running_sum.py's validation); fixed, under no_grad
with `loss.item()`. Makes no optimizer step, so `vramtrace run` marks none.
Knows nothing of vramtrace.

    hand_stepped.py leak|fixed
"""

import sys

import torch
from torch import nn

kind = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(),
                      nn.Linear(1024, 10)).cuda()
lr = 0.01


def evaluate():
    total = 0
    for _ in range(5):
        x = torch.randn(128, 256, device="cuda")
        loss = model(x).square().mean()
        total += loss if kind == "leak" else loss.item()
    return float(total) / 5


val_loss = None
for step in range(60):
    loss = model(torch.randn(64, 256, device="cuda")).square().mean()
    model.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    if step % 10 == 9:
        if kind == "leak":
            val_loss = evaluate()   # EVAL_CALL
        else:
            with torch.no_grad():
                val_loss = evaluate()
print("steps", step + 1, "val", float(val_loss))
