"""A training loop that keeps each step's loss and accuracy for a report at
the end, as most do. ``fixed``: ``losses.append(loss.detach())`` and a
detached accuracy: a few bytes a step kept on purpose, which `check` must
not fail on (a minor cause, under its floor). ``leak``: ``losses.append(loss)``
keeps each step's loss with its autograd graph, and every activation that
graph saved: a leak that grows by the step's activations.
Prints "steps N, mean loss X" last."""

from __future__ import annotations

import sys

import torch

STEPS, B, D, H = 30, 64, 256, 512


def main(fixed: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(),
                                torch.nn.Linear(H, H), torch.nn.ReLU(),
                                torch.nn.Linear(H, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses, accs = [], []
    for _ in range(STEPS):
        x = torch.randn(B, D, device="cuda")
        y = torch.randint(0, 10, (B,), device="cuda")
        logits = model(x)   # LOGITS_LINE
        loss = torch.nn.functional.cross_entropy(logits, y)   # LOSS_LINE
        opt.zero_grad()
        loss.backward(retain_graph=not fixed)
        opt.step()
        losses.append(loss.detach() if fixed else loss)   # LOSSES_LINE
        accs.append((logits.argmax(1) == y).float().mean().detach())
    mean = torch.stack(losses).mean().item()
    print(f"steps {len(losses)}, mean loss {mean:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] == "fixed")
