"""One rank of a four-rank job (torchrun, gloo), written as a pipeline stage
keeps what it sent: each step rank 2's stage sends an activation to the
next stage and keeps it in a dict keyed by micro-batch "until the backward
comes back", which never happens (the shape of the leak in pipeline
schedules that keep send buffers one micro-batch too long, here for good).
The other ranks' stages let it go. Never imports vramtrace.

  torchrun --nproc_per_node 4 ranks_stage.py
"""

import torch
import torch.distributed as dist

from rank_job import join_on_own_device, summed_over_ranks, train_step


class Stage:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.layer = torch.nn.Linear(64, 64).cuda()
        self.sent = {}   # micro-batch -> activation sent downstream

    def forward(self, step: int) -> torch.Tensor:
        act = self.layer(torch.randn(1024, 64, device="cuda"))
        if self.rank == 2:
            self.sent[step] = act.detach().clone()   # waits for a backward that never comes
        return act


rank = join_on_own_device()
stage = Stage(rank)
opt = torch.optim.SGD(stage.layer.parameters(), lr=0.1)
for step in range(8):
    loss = stage.forward(step).square().mean()
    train_step(loss, opt)
    summed_over_ranks(loss.item())
dist.destroy_process_group()
