"""Training with a validation every 10 steps that sums its batches' losses:
leaking, the validation runs without torch.no_grad() and the sum is a
tensor (`total += loss`), so it chains every batch's graph, activations and
all, until validate() returns, where each batch's would die with its
iteration: the step's peak grows with the number of batches (the classic
out of memory in validation); fixed, under no_grad with `loss.item()`.
Marked by its optimizer steps under `vramtrace run`; with `by-hand`, the
parameters are stepped by hand instead (`p.data.add_(p.grad, alpha=-lr)`,
as pytorch/examples' word_language_model does by default): no optimizer
step, so `vramtrace run` marks none. Knows nothing of vramtrace.

    val_running_sum.py leak|fixed [by-hand]
"""

import sys

import torch
from torch import nn

import hand_step

kind = sys.argv[1]
by_hand = sys.argv[2:3] == ["by-hand"]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                      nn.Linear(1024, 10)).cuda()
opt = None if by_hand else torch.optim.SGD(model.parameters(), lr=0.01)


def validate():
    total = 0
    for _ in range(20):
        x = torch.randn(128, 256, device="cuda")
        loss = model(x).square().mean()
        total += loss if kind == "leak" else loss.item()
    return float(total) / 20


for step in range(40):
    loss = model(torch.randn(64, 256, device="cuda")).square().mean()
    model.zero_grad()
    loss.backward()
    hand_step.step(model, opt)
    if step % 10 == 9:
        if kind == "leak":
            val = validate()   # VAL_CALL
        else:
            with torch.no_grad():
                val = validate()
print("steps", step + 1, "peak", torch.cuda.max_memory_allocated())
