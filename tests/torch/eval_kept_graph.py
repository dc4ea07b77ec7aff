"""Training with an evaluation every 10 steps whose result is kept until
the next one, as karpathy/ng-video-lecture's gpt.py keeps `losses =
estimate_loss()`: leaking, the evaluation runs without torch.no_grad() and
stores each batch's loss as a tensor (`losses[k] = loss`), so the result
holds every evaluation forward's graph, activations and all, until the next
evaluation replaces it; fixed, under no_grad with `loss.item()`. Marked by
its optimizer steps under `vramtrace run`; with `by-hand`, the parameters
are stepped by hand instead (`p.data.add_(p.grad, alpha=-lr)`, as
pytorch/examples' word_language_model does by default): no optimizer step,
so `vramtrace run` marks none, and each training step takes 10 ms, spun
on as a program waiting on a real device would (the simulated device takes
none; the tracker's walks are paid from the program's own time). Knows
nothing of vramtrace.

    eval_kept_graph.py leak|fixed [by-hand]
"""

import sys
import time

import torch
from torch import nn

import hand_step

kind = sys.argv[1]
by_hand = sys.argv[2:3] == ["by-hand"]
torch.manual_seed(0)
torch.backends.cudnn.enabled = False
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
opt = None if by_hand else torch.optim.SGD(model.parameters(), lr=0.01)


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


def device_time(seconds: float) -> None:
    """What a real device's step would take, spun on as a synchronizing
    program's CPU does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


val = None
for step in range(60):
    if by_hand:
        device_time(0.01)
    if step % 10 == 0:
        val = evaluate()
    loss = model(torch.randn(64, 256, device="cuda")).square().mean()
    model.zero_grad()
    loss.backward()
    hand_step.step(model, opt)
print("steps", step + 1, "val", float(val))
