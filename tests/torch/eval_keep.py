"""An evaluation script as notebooks and scripts write it, top-level code
knowing nothing of vramtrace: no optimizer, so no step for `vramtrace run`
to mark. ``leak``: the model is run without torch.no_grad() and each
batch's probabilities are kept on the device, each with the graph that made
it (its input and activations). ``fixed``: under torch.no_grad(), the
probabilities moved to the host. Prints "preds (N, C)" last."""

import sys
import time

import torch

fixed = sys.argv[1] == "fixed"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 1000)).cuda().eval()
preds = []
with torch.set_grad_enabled(not fixed):
    for _ in range(30):
        x = torch.randn(64, 512, device="cuda")
        out = model(x)   # MODEL_LINE
        probs = out.softmax(-1)
        preds.append(probs.cpu() if fixed else probs)
        time.sleep(0.04)   # the model's own time on a real device
print("preds", tuple(torch.cat([p.cpu() for p in preds]).shape))
