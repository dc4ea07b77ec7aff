"""A training loop laid out as pytorch/examples' minGPT-ddp trainer
(distributed/minGPT-ddp/mingpt/trainer.py): a ``Trainer`` object whose
``train()`` runs ``_run_epoch()``, which runs ``_run_batch()`` for each
batch (forward, backward, optimizer step) and whose ``main()`` keeps the
trainer in a local. One process, a small MLP on random batches.

``leak``: ``_run_batch`` appends each batch's ``logits.argmax(-1)`` to
``self.preds`` for an accuracy it never computes, so the list keeps every
step's predictions on the device. The walks during training reach the
trainer through ``_run_batch``'s ``self``, the walk at the exit through
``main``'s ``trainer``: `check` once read the one list as two causes.
``fixed``: the predictions go to the host (``.cpu()``).
Prints "batches N" last."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Trainer:
    def __init__(self, model: nn.Module, kind: str) -> None:
        self.model = model
        self.kind = kind
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.preds: list = []
        self.batches = 0

    def _run_batch(self, source: torch.Tensor, targets: torch.Tensor) -> float:
        logits = self.model(source)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        pred = logits.argmax(-1)
        self.preds.append(pred if self.kind == "leak" else pred.cpu())  # PREDS_LINE
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.batches += 1
        return loss.item()

    def _run_epoch(self, epoch: int) -> None:
        g = torch.Generator().manual_seed(epoch)
        for _ in range(8):
            source = torch.randn(64, 32, 128, generator=g).to("cuda")   # 64 sequences of 32
            targets = torch.randint(0, 512, (64, 32), generator=g).to("cuda")
            self._run_batch(source, targets)

    def train(self, epochs: int) -> None:
        for epoch in range(epochs):
            self._run_epoch(epoch)


def main(kind: str) -> None:
    model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 512)).to("cuda")
    trainer = Trainer(model, kind)
    trainer.train(4)
    print("batches", trainer.batches, flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixed")
