"""Training as people write it with Hugging Face transformers, knowing
nothing of vramtrace: a small GPT-2 (random weights from its config, no
download) trained with AdamW, and a validation loss taken every step.

  python hf_train.py leak|fixed

``leak``: the validation loss is computed without torch.no_grad() and summed
as a tensor (``total += vloss``): the sum keeps every step's validation
graph, and with it its activations, to the end.
``fixed``: summed as a number (``vloss.item()``).
Prints "done N" last."""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

kind = sys.argv[1]
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=2000, n_positions=128)
model = GPT2LMHeadModel(config).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
total = 0.0
for step in range(20):
    ids = torch.randint(0, config.vocab_size, (8, 64), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    val = torch.randint(0, config.vocab_size, (8, 64), device="cuda")
    vloss = model(input_ids=val, labels=val).loss   # VAL_LINE
    total += vloss if kind == "leak" else vloss.item()   # SUM_LINE
print("done", step + 1)
