"""A small training script that knows nothing of vramtrace, as a user writes it.

  python train_leak.py leak|early|fixed [--steps N] [--torch-snapshot PATH] [--marks]
                       [--validate-every N]

`leak` keeps every step's logits in the module-level list `history`;
`early` only the first 10 steps' (a debugging list left in: a leak that
ends early in a long run); `fixed` keeps the loss as a float. Prints one line per step: "step N
allocated reserved" from torch.cuda.memory_allocated() / memory_reserved(),
and at the end "max_allocated X" and "max_reserved Y". --torch-snapshot
turns PyTorch's own recorder on (_record_memory_history) and dumps its
snapshot there at the end. --marks: the script marks its steps itself with
vramtrace.mark(). --validate-every N: a validation batch made before the
loop stays on the device, evaluated (no_grad) every N steps.
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("kind", choices=["leak", "early", "fixed"])
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--torch-snapshot", default="")
ap.add_argument("--marks", action="store_true")
ap.add_argument("--validate-every", type=int, default=0)
args = ap.parse_args()
torch.backends.cudnn.enabled = False
torch.manual_seed(0)
if args.torch_snapshot:
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
history = []
if args.validate_every:
    val_x = torch.randn(2048, 256, device="cuda")
for step in range(args.steps):
    if args.marks:
        import vramtrace
        vramtrace.mark(f"epoch 0 batch {step}")
    x = torch.randn(512, 256, device="cuda")
    logits = model(x)                                    # LOGITS_LINE
    loss = logits.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if args.validate_every and step % args.validate_every == 0:
        with torch.no_grad():
            model(val_x).pow(2).mean().item()
    if args.kind == "leak" or (args.kind == "early" and step < 10):
        history.append(logits)
    else:
        history.append(loss.item())
    print("step", step, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), flush=True)
print("max_allocated", torch.cuda.max_memory_allocated())
print("max_reserved", torch.cuda.max_memory_reserved())
if args.torch_snapshot:
    torch.cuda.memory._dump_snapshot(args.torch_snapshot)
