"""pytorch/examples' dcgan/main.py training loop, made small (its netG and
netD at 16x16, random images for a dataset), with its two Adam optimizers'
steps done by hand instead (`p.data.add_(p.grad, alpha=-lr)`): no optimizer
step, so `vramtrace run` marks none, and `check` steps it by its backward
passes. Three passes an iteration (errD_real, errD_fake, errG), two
zero_grads (netD's, netG's). With `accumulate`, the discriminator's real
batch in four micro-batches, each its own backward into the same
gradients. Clean: nothing is kept past its iteration. Knows nothing of
vramtrace. cuDNN off: the simulator has none (tests/sim/README.md).

    dcgan_by_hand.py [accumulate]
"""

import sys

import torch
from torch import nn

import hand_step

torch.backends.cudnn.enabled = False
torch.manual_seed(0)
accumulate = sys.argv[1:2] == ["accumulate"]
dev, nz, ngf, ndf, lr = "cuda", 16, 16, 16, 2e-4
netG = nn.Sequential(
    nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
    nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
    nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh()).to(dev)
netD = nn.Sequential(
    nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2),
    nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid()).to(dev)
criterion = nn.BCELoss()
G_losses, D_losses = [], []
iters = 30
for i in range(iters):
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    real = torch.randn(32, 3, 16, 16, device=dev)
    for part in real.chunk(4 if accumulate else 1):
        label = torch.full((part.size(0),), 1.0, device=dev)
        errD_real = criterion(netD(part).view(-1), label)
        errD_real.backward()
    noise = torch.randn(32, nz, 1, 1, device=dev)
    fake = netG(noise)
    label = torch.full((32,), 0.0, device=dev)
    errD_fake = criterion(netD(fake.detach()).view(-1), label)
    errD_fake.backward()
    hand_step.sgd(netD.parameters(), lr)
    # (2) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    label.fill_(1.0)
    errG = criterion(netD(fake).view(-1), label)
    errG.backward()
    hand_step.sgd(netG.parameters(), lr)
    G_losses.append(errG.item())
    D_losses.append(errD_real.item() + errD_fake.item())
print("iterations", iters)
