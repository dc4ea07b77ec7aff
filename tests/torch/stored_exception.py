"""A training loop that keeps the exceptions of the batches it skips, as
programs do to report them at the end (a pattern from public leak reports:
the exception's traceback keeps the frame that raised, and with it that
step's activations).

  python stored_exception.py leak|fixed

`leak` keeps the exception itself; `fixed` keeps its message. Prints
"failures N" at the end.
"""

import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.backends.cudnn.enabled = False
model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 8)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
failures = []


def step(i: int) -> None:
    x = torch.randn(256, 64, device="cuda")
    logits = model(x)
    loss = logits.pow(2).mean()
    if i % 2 == 0:
        raise ValueError(f"bad batch {i}")    # RAISE_LINE
    opt.zero_grad()
    loss.backward()
    opt.step()


for i in range(8):
    try:
        step(i)
    except ValueError as e:
        failures.append(e if sys.argv[1] == "leak" else str(e))
print("failures", len(failures))
