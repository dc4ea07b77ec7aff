"""A training loop whose model torch.compile builds with its default
backend (inductor): Triton kernels compiled at run time, loaded with
cuModuleLoad and launched on the device (on the simulated one:
tests/sim/driver_module.c). Prints memory_allocated() after each step: the
figures a run under vramtrace must print alike.

``python compiled_loop.py [leak]``: leak keeps each step's output (with its
graph) in a module list.
"""

import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                            torch.nn.Linear(128, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters())
compiled = torch.compile(model)
kept = []
for step in range(6):
    x = torch.randn(64, 64, device="cuda")
    out = compiled(x)   # OUT_LINE
    loss = out.float().pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if "leak" in sys.argv[1:]:
        kept.append(out)
    torch.cuda.synchronize()
    print("step", step, torch.cuda.memory_allocated(), flush=True)
