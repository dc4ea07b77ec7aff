"""A model of the program's own (a block of attention and an MLP, several
lines of forward, as karpathy/minGPT's model.py), trained step after step
with a validation loss computed at each step's end in a callback, as
minGPT's Trainer calls `on_batch_end`: leaking, the validation runs without
torch.no_grad() and the loss is kept as a tensor in a list, so every step's
validation graph (the activations it saved, at each line of forward) stays
to the end; fixed, under no_grad with `loss.item()`. Marked by its
optimizer steps under `vramtrace run`. Knows nothing of vramtrace.

    val_kept_every_step.py leak|fixed
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F

kind = sys.argv[1]
torch.manual_seed(0)
WIDTH, SEQ, BATCH = 64, 32, 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.fc, self.proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=2)
        att = (q @ k.transpose(-2, -1)) * (WIDTH ** -0.5)
        att = F.softmax(att, dim=-1)
        x = x + att @ v
        h = F.gelu(self.fc(self.ln2(x)))
        return x + self.proj(h)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x, y):
        logits = self.head(self.blocks(x).mean(dim=1))
        return F.cross_entropy(logits, y)


model = Model().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
val_x = torch.randn(BATCH, SEQ, WIDTH, device="cuda")
val_y = torch.randint(10, (BATCH,), device="cuda")
val_losses = []


def on_batch_end():
    if kind == "leak":
        val_losses.append(model(val_x, val_y))   # VAL_LINE
    else:
        with torch.no_grad():
            val_losses.append(model(val_x, val_y).item())


for step in range(30):
    x = torch.randn(BATCH, SEQ, WIDTH, device="cuda")
    y = torch.randint(10, (BATCH,), device="cuda")
    loss = model(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    on_batch_end()
print("steps", step + 1, "validations", len(val_losses))
