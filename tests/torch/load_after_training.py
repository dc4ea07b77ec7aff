"""Training marked by its optimizer steps, then the best model loaded back
from its checkpoint and evaluated, as pytorch/examples' word_language_model
ends (`model = torch.load(f)` after the last epoch, then the test set):
loading puts every saved tensor on the device at one line, in one call that
takes several of the run's usual steps and frees nothing meanwhile. Knows
nothing of vramtrace.

    load_after_training.py CHECKPOINT
"""

import sys

import torch
from torch import nn

path = sys.argv[1]
torch.manual_seed(0)
torch.backends.cudnn.enabled = False
model = nn.Linear(32, 32).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(30):
    loss = model(torch.randn(8, 32, device="cuda")).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
# the "best model": many tensors, as a real model's state has
torch.save({f"w{i}": torch.randn(256) for i in range(600)}, path)
best = torch.load(path, map_location="cuda")   # LOAD_LINE
with torch.no_grad():
    for _ in range(30):   # the test set, no optimizer step: no mark
        total = sum(w.sum() for w in list(best.values())[:8])
        model(torch.randn(8, 32, device="cuda")).sum().item()
print("loaded", len(best), "total", float(total))
