"""A small transformer language model's training loop, as a user writes it,
for scripts/gpu-check: the same program on a real GPU and on the simulated
device.

  python small_transformer.py OUT.json [--steps N] [--leak] [--use-allocator]
                              [--track] [--snapshot PATH]

A two-layer nn.TransformerEncoder (width 128, 4 heads, feed-forward 512) over
64-token sequences of a 1000-word vocabulary, batch 16, trained with AdamW.
--leak keeps every step's logits (made at the line marked LOGITS_LINE) in
the module-level list `history`; without it only the loss, as a float.
--use-allocator: vramtrace.torch.use_allocator() before the first CUDA
allocation. --track: the loop runs under vramtrace.torch.track(), with a
mark per step. --snapshot: vramtrace.snapshot(PATH) at the end (under
`vramtrace run` the run writes its own at exit).

Writes OUT.json: the device's name, torch's version, PyTorch's
memory_allocated() and memory_reserved() after every step (its caching
allocator only), the median ms per step and vramtrace.stats(0) when
vramtrace serves the allocations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn

VOCAB, WIDTH, HEADS, FF, LAYERS, SEQ, BATCH = 1000, 128, 4, 512, 2, 64, 16

history = []


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, FF, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--leak", action="store_true")
    ap.add_argument("--use-allocator", action="store_true")
    ap.add_argument("--track", action="store_true")
    ap.add_argument("--snapshot", default="")
    args = ap.parse_args()
    torch.backends.cudnn.enabled = False
    torch.manual_seed(0)

    vt = vtt = None
    if args.use_allocator or args.track or args.snapshot:
        import vramtrace as vt
        import vramtrace.torch as vtt
    if args.use_allocator:
        vtt.use_allocator()

    model = TinyLM().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    tracker = vtt.track() if args.track else None
    if tracker is not None:
        tracker.__enter__()
    figures, times = [], []
    for step in range(args.steps):
        if vtt is not None:
            vtt.mark(f"step {step}")
        t0 = time.perf_counter()
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
        logits = model(tokens[:, :-1])                   # LOGITS_LINE
        loss = loss_fn(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.leak:
            history.append(logits)                       # the leak
        else:
            history.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if not args.use_allocator:   # a pluggable allocator has no PyTorch statistics
            figures.append([torch.cuda.memory_allocated(), torch.cuda.memory_reserved()])
    if vtt is not None:
        vtt.mark("end")
    if args.snapshot:
        vt.snapshot(args.snapshot)
    if tracker is not None:
        tracker.__exit__(None, None, None)

    out = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "steps": args.steps,
        "ms_per_step": statistics.median(times) * 1e3,
        "kept": len(history),
    }
    if not args.use_allocator:
        out["torch_figures"] = figures
        out["max_allocated"] = torch.cuda.max_memory_allocated()
    if vt is not None and args.use_allocator:
        out["vramtrace"] = vt.stats(0)
    if tracker is not None:
        # which of track()'s paths saw the ops: its op observer, or the
        # dispatch mode where the observer could not be built for this torch
        # (before session 81 it could not for torch 2.12 or older, the GPU
        # image's 2.11 among them: the real runs' tracked ms/step were the mode's)
        out["ops_seen_by"] = tracker.ops_seen_by
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
