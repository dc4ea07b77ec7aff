"""An evaluation loop, no optimizer step (so no mark), as an inference or
``Trainer.evaluate()`` script runs: a model written as Hugging Face's GPT-2
is (a causal-mask buffer its attention never reads) built on the CPU, moved
with ``.to("cuda")`` (Module._apply: ``param.data = copy``, which no op
shows) and run under ``torch.no_grad()`` for about two seconds, longer than
`check`'s time rule waits. The model is local to main(): gone before the
program ends. ``leak``: each batch's logits kept on the device in a module
list ("predictions gathered for metrics"); ``fixed``: their argmax on the
host. Prints "batches N" last."""

from __future__ import annotations

import sys
import time

import torch
from torch import nn

T, C, V = 32, 64, 128
kept = []


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.proj = nn.Linear(C, C)
        self.head = nn.Linear(C, V)
        # GPT-2's causal mask, kept for its eager attention; never read here
        self.register_buffer("bias", torch.tril(torch.ones(T, T)), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.proj(self.wte(ids))))


def main(leak: bool) -> int:
    torch.manual_seed(0)
    model = Net()
    model.to("cuda")
    model.eval()
    n = 0
    with torch.no_grad():
        for _ in range(24):
            ids = torch.randint(0, V, (8, T), device="cuda")
            logits = model(ids)
            kept.append(logits if leak else logits.argmax(-1).cpu())
            n += 1
            time.sleep(0.1)
    return n


if __name__ == "__main__":
    print("batches", main(sys.argv[1] == "leak"))
