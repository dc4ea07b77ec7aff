"""A training script in the shape of public trainers (minGPT's Trainer,
Lightning-style callbacks), knowing nothing of vramtrace.

  python trainer_leak.py leak|fixed [--steps N]

A Trainer runs the loop and calls the callbacks registered with it after
every batch; the dataset indexes a CPU index tensor per item (as minGPT's
adder does), so the program also makes thousands of small host tensors.
`leak`: a logger's callback appends `trainer.loss` (a CUDA tensor) to its
history every step; `fixed` appends `loss.item()`. The logger and the
trainer refer to each other, so the history is freed by the interpreter's
last garbage collection at exit: the leak is only visible if what the
program still held at its end counts as held. Prints "kept N" at the end.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Digits(Dataset):
    """Items made from a shuffled CPU index tensor, one 0-dim view per item."""

    def __init__(self, n: int = 512, width: int = 16):
        self.ixes = torch.randperm(4 * n)[n:2 * n]     # a view of a dropped base
        self.width = width

    def __len__(self) -> int:
        return len(self.ixes)

    def __getitem__(self, i: int):
        k = self.ixes[i].item()
        x = torch.tensor([(k >> b) & 1 for b in range(self.width)], dtype=torch.float32)
        return x, torch.tensor(k % 2)


class Trainer:
    def __init__(self, model: nn.Module, data: Dataset, steps: int):
        self.model, self.data, self.steps = model, data, steps
        self.callbacks = []
        self.loss = None

    def add_callback(self, fn) -> None:
        self.callbacks.append(fn)

    def run(self) -> None:
        opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        loader = DataLoader(self.data, batch_size=32, shuffle=True, num_workers=0)
        it = iter(loader)
        for _ in range(self.steps):
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            x, y = x.cuda(), y.cuda()
            logits = self.model(x)
            self.loss = nn.functional.cross_entropy(logits, y)    # LOSS_LINE
            opt.zero_grad(set_to_none=True)
            self.loss.backward()
            opt.step()
            for fn in self.callbacks:
                fn(self)


class LossLog:
    """Keeps the loss of every step (the leak: the tensor, not its value).
    It and the trainer refer to each other, as loggers and trainers do: once
    main() returns they are garbage that only a collection frees - at exit,
    the interpreter's last one."""

    def __init__(self, trainer: Trainer, keep_tensors: bool):
        self.trainer, self.keep_tensors, self.history = trainer, keep_tensors, []
        trainer.add_callback(self.on_batch_end)

    def on_batch_end(self, t: Trainer) -> None:
        self.history.append(t.loss if self.keep_tensors else t.loss.item())   # KEEP_LINE


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["leak", "fixed"])
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.enabled = False
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 2)).cuda()
    trainer = Trainer(model, Digits(), args.steps)
    log = LossLog(trainer, args.kind == "leak")
    trainer.run()
    print("kept", len(log.history))


if __name__ == "__main__":
    main()
