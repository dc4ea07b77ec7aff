"""An evaluation script as scripts write it, knowing nothing of vramtrace:
no optimizer, so no step for `vramtrace run` to mark.

  python eval_keep.py leak|fixed|leak-in-function

``leak``: the model is run without torch.no_grad() and each batch's
probabilities are kept on the device, each with the graph that made it (its
input and activations), in a list the script holds to its end.
``leak-in-function``: the same list is the evaluation function's own, freed
when it returns: the memory grew through the loop all the same.
``fixed``: under torch.no_grad(), the probabilities moved to the host.
Prints "preds (N, C)" last."""

import sys
import time
from typing import List

import torch


def evaluate(model: torch.nn.Module, fixed: bool, preds: List[torch.Tensor]) -> tuple:
    with torch.set_grad_enabled(not fixed):
        for _ in range(30):
            x = torch.randn(64, 512, device="cuda")
            out = model(x)   # MODEL_LINE
            probs = out.softmax(-1)
            preds.append(probs.cpu() if fixed else probs)
            time.sleep(0.04)   # the model's own time on a real device
    return tuple(torch.cat([p.cpu() for p in preds]).shape)


kind = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                            torch.nn.Linear(1024, 1000)).cuda().eval()
preds: List[torch.Tensor] = []
print("preds", evaluate(model, kind == "fixed", [] if kind == "leak-in-function" else preds))
