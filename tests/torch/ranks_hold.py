"""One rank of a four-rank job (torchrun, gloo) that allocates on the device
and then waits: for a snapshot signal sent to the job from outside. Never
imports vramtrace.

  torchrun --nproc_per_node 4 ranks_hold.py DIR

Each rank writes DIR/ready-RANK (its pid) once it holds its tensors, then
polls for DIR/release and leaves.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

folder = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
kept = [torch.full((256, 256), float(rank), device="cuda") for _ in range(3)]
with open(os.path.join(folder, f"ready-{rank}.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(folder, f"ready-{rank}.tmp"), os.path.join(folder, f"ready-{rank}"))
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(folder, "release")) and time.monotonic() < deadline:
    time.sleep(0.02)
dist.destroy_process_group()
