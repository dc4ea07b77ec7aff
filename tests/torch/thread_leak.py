"""A thread the program starts keeps an average of the model's weights (an
EMA or evaluation thread fed through a queue), and runs a backward of its
own (a sensitivity probe), so that its ops and its backward's come through
a thread other than the one that imported torch.

``python thread_leak.py leak|fixed``: leak, the thread appends every step's
average to a module-level list; fixed, it keeps the latest only. Prints the
list's length and memory_allocated() after each step.
"""

import queue
import sys
import threading

import torch
from torch import nn

kind = sys.argv[1]
torch.manual_seed(0)
model = nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
feed: "queue.Queue" = queue.Queue()
averages = []        # what the averaging thread keeps
probe = torch.ones(256, device="cuda", requires_grad=True)


def average_weights() -> None:
    avg = None
    while (w := feed.get()) is not None:
        avg = w.clone() if avg is None else avg * 0.9 + w * 0.1   # AVG_LINE
        if kind == "leak":
            averages.append(avg)
        else:
            averages[:] = [avg]
        (avg @ probe).square().sum().backward()   # the thread's own backward
        del w
        feed.task_done()
    feed.task_done()


thread = threading.Thread(target=average_weights)
thread.start()
for step in range(8):
    x = torch.randn(512, 256, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    feed.put(model.weight.detach())
    feed.join()          # the thread's work is part of the step
    print("step", step, "averages", len(averages), torch.cuda.memory_allocated(), flush=True)
feed.put(None)
thread.join()
