"""Training in stages, each with an optimizer of its own, under `vramtrace
run` (the program never imports vramtrace): which optimizer's steps are
marked (vramtrace/_autorun.py).

    stagewise.py leak|fixed|gan|gan2 STEPS

leak: a model is trained STEPS steps by its optimizer, then a second model
on its output by a second optimizer, the first one still alive (it lives on
its model: layer-wise training, a frozen backbone and a new head), and the
second stage keeps each step's output (made at OUT_LINE, called from
STAGE2_LINE); fixed: the same without
that, and the first stage's gradients let go when it ends (zero_grad).
gan: two optimizers take turns within each of STEPS steps (a GAN's
discriminator, then its generator); gan2: the generator steps twice a step.
Prints "marks expected N"."""

import sys

import torch

mode, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
torch.backends.cudnn.enabled = False


def model():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256)).cuda()


a, b = model(), model()
opt_a = torch.optim.Adam(a.parameters(), lr=1e-3)
opt_b = torch.optim.Adam(b.parameters(), lr=1e-3)
x = torch.randn(128, 256, device="cuda")
kept = []


def train_step(m, opt, inp):
    out = m(inp)   # OUT_LINE
    loss = out.square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return out


if mode in ("leak", "fixed"):
    for _ in range(steps):
        train_step(a, opt_a, x)
    if mode == "fixed":
        opt_a.zero_grad()   # the first stage over: its gradients go
    h = a(x).detach()
    for _ in range(steps):
        out = train_step(b, opt_b, h)   # STAGE2_LINE
        if mode == "leak":
            kept.append(out.detach())   # what the leak keeps
        del out   # (else the loop's variable holds it a step longer: a finding too)
    # the first stage's steps, then the second's from its third on
    print("marks expected", steps + steps - 2)
else:
    for _ in range(steps):
        train_step(a, opt_a, x)
        for _ in range(2 if mode == "gan2" else 1):
            train_step(b, opt_b, x)
    print("marks expected", steps)   # the discriminator's steps
torch.cuda.synchronize()
