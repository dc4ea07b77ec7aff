"""One rank of a four-rank job (torchrun, gloo), each rank on its own
device: eight training steps, the ranks' losses all-reduced every step. Ranks
2 and 3 receive a buffer every step; rank 2 keeps each one, as a pipeline
stage that never lets go of what it received would, rank 3 lets it go (the
fixed twin, in the same job). Never imports vramtrace.

  torchrun --nproc_per_node 4 ranks_growth.py
"""

import torch
import torch.distributed as dist

from rank_job import join_on_own_device, model_and_optimizer, summed_over_ranks, train_step

rank = join_on_own_device()
model, opt = model_and_optimizer()
received = []
for step in range(8):
    loss = model(torch.randn(32, 64, device="cuda")).square().mean()
    train_step(loss, opt)
    total = summed_over_ranks(loss.item())
    if rank in (2, 3):
        recv_buf = torch.empty(256 * 1024, device="cuda")
        recv_buf.fill_(float(total))
        if rank == 2:
            received.append(recv_buf)
dist.destroy_process_group()
