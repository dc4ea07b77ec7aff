"""Two epochs of training, each followed by a validation pass that sums its losses as
tensors (``val_loss += criterion(model(x), y)``, the forum's most reported
"out of memory during validation"): every batch's graph, and the
activations it saved, live until the pass ends. Training marks each step
(`vramtrace run --track` marks optimizer steps); the validation makes no
mark, and takes long enough (each batch spins 0.1 s, as a program waiting
on a real device would) for the tracker to find its marks gone quiet and
walk what the pass keeps. Knows nothing of vramtrace.

``python quiet_validation.py leak|fixed``: fixed, the pass runs under
``no_grad()`` and sums ``loss.item()``. Prints each epoch's validation
loss. (`check` judges the first pass: the second epoch's marks end its step.)
DEVICE_TIME_S=SECONDS sets a batch's spin (0: none, for a run whose output
alone is compared).
"""

import os
import sys
import time

import torch
from torch import nn

kind = sys.argv[1]
BATCH_DEVICE_TIME = float(os.environ.get("DEVICE_TIME_S", "0.1"))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
criterion = nn.CrossEntropyLoss()
train = [(torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda"))
         for _ in range(8)]
val = [(torch.randn(128, 256, device="cuda"), torch.randint(0, 10, (128,), device="cuda"))
       for _ in range(20)]


def device_time(seconds: float) -> None:
    """What a real device's batch would take, spun on as a synchronizing
    program's CPU does (the simulated device takes none)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def validate() -> float:
    model.eval()
    val_loss = 0
    for x, y in val:
        device_time(BATCH_DEVICE_TIME)
        if kind == "leak":
            val_loss += criterion(model(x), y)   # VAL_LINE: every batch's graph kept
        else:
            with torch.no_grad():
                val_loss += criterion(model(x), y).item()
    return float(val_loss) / len(val)


for epoch in range(2):
    model.train()
    for x, y in train:
        opt.zero_grad()
        criterion(model(x), y).backward()
        opt.step()
    print(f"val {validate():.4f}")
