"""One rank of a two-rank job (torchrun, gloo): each rank trains a step on
its own device and keeps one tensor. Never imports vramtrace.

  torchrun --nproc_per_node 2 ranks.py
"""

import os

import torch
import torch.distributed as dist

from rank_job import join_on_own_device, model_and_optimizer, summed_over_ranks, train_step

rank = join_on_own_device()
model, opt = model_and_optimizer()
kept = []
for step in range(3):
    out = model(torch.randn(32, 64, device="cuda"))
    train_step(out.sum(), opt)
    kept.append(out.detach())
total = summed_over_ranks(float(rank))
print(f"rank {rank} of {dist.get_world_size()} pid {os.getpid()} total {float(total)} "
      f"allocated {torch.cuda.memory_allocated()}", flush=True)
dist.destroy_process_group()
