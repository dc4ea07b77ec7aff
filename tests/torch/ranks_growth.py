"""One rank of a four-rank job (torchrun, gloo), each rank on its own
device: eight training steps, the ranks' losses all-reduced every step. Ranks
2 and 3 receive a buffer every step; rank 2 keeps each one, as a pipeline
stage that never lets go of what it received would, rank 3 lets it go (the
fixed twin, in the same job). Never imports vramtrace.

  torchrun --nproc_per_node 4 ranks_growth.py
"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
received = []
for step in range(8):
    loss = model(torch.randn(32, 64, device="cuda")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    total = torch.tensor([loss.item()])
    dist.all_reduce(total)
    if rank in (2, 3):
        recv_buf = torch.empty(256 * 1024, device="cuda")
        recv_buf.fill_(float(total))
        if rank == 2:
            received.append(recv_buf)
dist.destroy_process_group()
