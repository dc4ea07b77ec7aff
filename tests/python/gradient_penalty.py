"""A WGAN-GP critic step that logs its gradient penalty as a tensor
(``history.append(gp)``): the penalty's graph (``create_graph=True``) lives
on through the list. Its saved tensors were freed by the step's backward,
but its nodes remain, and the gradient accumulator of ``mix`` (a leaf made
to require grad) keeps ``mix`` itself, whose ``.grad`` keeps the gradient.
The fixed twin logs ``gp.item()``.

Run as ``python gradient_penalty.py leak|fixed OUT.vtsnap``. Prints one JSON
line: the steps.
"""

from __future__ import annotations

import json
import sys

import torch

import vramtrace
import vramtrace.torch as vtt

STEPS, B, D = 8, 32, 64


def main() -> None:
    fixed = sys.argv[1] == "fixed"
    torch.manual_seed(0)
    with vtt.track():
        critic = torch.nn.Sequential(torch.nn.Linear(D, 128), torch.nn.LeakyReLU(0.2),
                                     torch.nn.Linear(128, 1))
        opt = torch.optim.Adam(critic.parameters(), 1e-4, betas=(0.0, 0.9))
        history = []
        for i in range(STEPS):
            vtt.mark(f"step {i}")
            real, fake = torch.randn(B, D), torch.randn(B, D)
            eps = torch.rand(B, 1)
            mix = (eps * real + (1 - eps) * fake).requires_grad_(True)
            grad, = torch.autograd.grad(critic(mix).sum(), mix, create_graph=True)
            gp = ((grad.norm(2, dim=1) - 1) ** 2).mean()
            loss = critic(fake).mean() - critic(real).mean() + 10 * gp
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append(gp.item() if fixed else gp)   # HISTORY_LINE
            del real, fake, eps, mix, grad, gp, loss
        vtt.mark("end")
        vramtrace.snapshot(sys.argv[2])
    print(json.dumps({"steps": STEPS}))


if __name__ == "__main__":
    main()
