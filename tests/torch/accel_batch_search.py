"""accelerate's find_executable_batch_size, used as its docs show it: the
training function is retried with a smaller batch after each out-of-memory
error. On a device where no batch tried fits beside what the failed attempts
leave in PyTorch's cache, the retry's first backward (the autograd thread's
first matrix product) makes cuBLAS's handle and dies with
CUBLAS_STATUS_ALLOC_FAILED: accelerate empties the cache inside its except
clause, while the failed attempt's tensors are still alive.

    python accel_batch_search.py      prints each batch tried
"""

import torch
import torch.nn as nn
from accelerate.utils import find_executable_batch_size

D = 1024
model = nn.Sequential(*[nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(4)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@find_executable_batch_size(starting_batch_size=16384)
def train(batch_size):
    print("trying batch", batch_size, flush=True)
    for _ in range(3):
        x = torch.randn(batch_size, D, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return batch_size


print("batch found", train())
