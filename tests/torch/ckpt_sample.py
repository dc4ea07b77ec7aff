"""Sampling from a saved checkpoint as nanoGPT's sample.py does: the
checkpoint loaded straight onto the device (``map_location``), the model's
weights copied from it, then tokens generated under ``no_grad`` and
autocast. Under autocast PyTorch casts each weight once and keeps the cast
for the region (its weight cache): the parameters themselves are read once,
then not again while the model runs, and they are still the model's state,
not a finding (they were flagged as lingering when the run ended before
the tracker's second tick).

The leak (found on nanoGPT's sample.py): the loaded checkpoint stays
referenced by module globals (``checkpoint``, ``state_dict``): a second copy
of the weights and the optimizer's moments on the device for the whole
run. Fixed: ``del checkpoint, state_dict`` once the weights are copied.

``python ckpt_sample.py save PATH``: a checkpoint as a training run saves
one (the model's and the optimizer's state; a separate process, as the
training run is: its optimizer step would be a step of this one).
``python ckpt_sample.py leak|fixed PATH``: samples from it, and prints the
tokens made and memory_allocated().
"""

import sys
import time

import torch
from torch import nn

kind, path = sys.argv[1:3]
STEPS = 2000
# and for MIN_S seconds at least: with no marks, `check` judges a tensor by
# the program's time it was held after its last use, against a grace of at
# least 1 s (the tracker's pauses left out). 2000 tokens took 1.1 s on an
# idle host, so the checkpoint, held from the first 5% of the run to its
# end, stayed under it: the leak was found only where the host was loaded.
MIN_S = 3.0


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(65, 64)
        self.up = nn.Linear(64, 512, bias=False)
        self.down = nn.Linear(512, 64, bias=False)
        self.head = nn.Linear(64, 65, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        x = x + self.down(torch.relu(self.up(x)))
        return self.head(x[:, -1, :])


torch.manual_seed(0)
if kind == "save":
    trained = TinyLM()
    opt = torch.optim.AdamW(trained.parameters())
    trained(torch.zeros(2, 4, dtype=torch.long)).sum().backward()
    opt.step()
    torch.save({"model": trained.state_dict(), "optimizer": opt.state_dict()}, path)
    sys.exit(0)

checkpoint = torch.load(path, map_location="cuda")   # CKPT_LINE
model = TinyLM()
state_dict = checkpoint["model"]
model.load_state_dict(state_dict)
model.cuda().eval()
if kind == "fixed":
    del checkpoint, state_dict

idx = torch.zeros(2, 1, dtype=torch.long, device="cuda")
with torch.no_grad(), torch.amp.autocast(device_type="cuda", dtype=torch.float16):
    began = time.perf_counter()
    while idx.shape[1] <= STEPS or time.perf_counter() - began < MIN_S:
        logits = model(idx[:, -8:])
        idx = torch.cat([idx, logits.float().argmax(-1, keepdim=True)], 1)
print(f"tokens {idx.shape[1]}, allocated {torch.cuda.memory_allocated()}")
