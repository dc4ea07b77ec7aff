"""A saved-tensors stash, as an activation-offloading helper keeps one: a
``saved_tensors_hooks`` pack hook that keeps what autograd saves in a list,
and an unpack hook that reads it back. Entered with no ``as`` around the
whole training loop (``with Stash(): ...``), only the with block holds it,
and it keeps every activation every step saved until the loop ends. The
collector does not see a running frame's value stack, where the block keeps
the manager's bound ``__exit__``: the chain read from nowhere (`method
__exit__.__self__ → Stash.kept`) until the walk named the block. Fixed: the
stash is entered for each step. Knows nothing of vramtrace.

``python with_stash.py leak|fixed``: prints one line a step.
"""

import sys

import torch
from torch import nn

kind = sys.argv[1]
STEPS = 8


class Stash:
    """Keeps what autograd saves while the block runs; lets it go at the
    block's end."""

    def __init__(self):
        self.kept = []

    def __enter__(self):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self.hooks.__enter__()

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        self.kept.clear()

    def pack(self, t):
        self.kept.append(t)
        return len(self.kept) - 1

    def unpack(self, i):
        return self.kept[i]


def train_step(model, opt, step):
    x = torch.randn(64, 512, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step}")


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if kind == "leak":
        with Stash():   # every step's saved activations kept until the loop ends
            for step in range(STEPS):
                train_step(model, opt, step)   # STASH_LINE: where the block runs
    else:
        for step in range(STEPS):
            with Stash():
                train_step(model, opt, step)


main()
