"""A forward hook registered at every step and never removed, each bound to a
tensor of its own step, as peft's X-LoRA did during generate (one
`register_forward_hook` per forward, each a functools.partial over that
forward's scalings, only the last removed: huggingface/peft PR #2761; also
NeuroBench #184, MRFI PR #5): here through a default argument (`def log_ratio(mod, inp,
out, x=x)`: a closure over `x` itself would read the one variable, the
current batch, and keep nothing): the hooks pile up on the layer and every
step's batch stays, used by its hook at every forward, so none is ever
stale. The model is a local of main(), gone by the snapshot at exit: the
growth finding on the batch's line named no holder until a mark walked what
the loop carries more of each step. Fixed: the hook's handle is removed
after the step. Each step spins DEVICE_TIME_S (default 0.015 s) as a
synchronizing program waits for a real device (the simulated one takes no
time): the holder walks' credit is a share of the program's own time, and a
chain from the model to a hook's defaults is several heap passes deep.
Knows nothing of vramtrace.

``python hooks_pile_up.py leak|fixed``: prints one line a step.
"""

import os
import sys
import time

import torch
from torch import nn

kind = sys.argv[1]
STEPS = 60
STEP_DEVICE_TIME = float(os.environ.get("DEVICE_TIME_S", "0.015"))


def device_time(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ratios = []
    for step in range(STEPS):
        x = torch.randn(128, 256, device="cuda")   # BATCH_LINE
        y = torch.randint(0, 10, (128,), device="cuda")

        def log_ratio(mod, inp, out, x=x):
            ratios.append(out.norm() / x.norm())

        handle = model[0].register_forward_hook(log_ratio)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if kind == "fixed":
            handle.remove()
        ratios.clear()
        device_time(STEP_DEVICE_TIME)
        print(f"step {step}")


main()
