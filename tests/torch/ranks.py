"""One rank of a two-rank job (torchrun, gloo): each rank trains a step on
its own device and keeps one tensor. Never imports vramtrace.

  torchrun --nproc_per_node 2 ranks.py
"""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
for step in range(3):
    out = model(torch.randn(32, 64, device="cuda"))
    out.sum().backward()
    opt.step()
    opt.zero_grad()
    kept.append(out.detach())
total = torch.tensor([float(rank)])
dist.all_reduce(total)
print(f"rank {rank} of {dist.get_world_size()} pid {os.getpid()} total {float(total)} "
      f"allocated {torch.cuda.memory_allocated()}", flush=True)
dist.destroy_process_group()
