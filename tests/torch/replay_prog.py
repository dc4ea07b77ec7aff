"""A varied allocation pattern for PyTorch's caching allocator: sizes across
the small/large boundary (and the 10 MiB one), frees out of order, a second
stream with record_stream, empty_cache. No kernels: only the allocator works.

Prints torch's own ``max_reserved N`` and ``max_allocated N`` at the end;
an allocation refused (torch.OutOfMemoryError) ends the loop with
``oom_at K SIZE``: the K-th allocation (from 1), of SIZE bytes.
``--fraction F`` sets the per-process memory fraction first;
``--pickle PATH`` records PyTorch's history and dumps its snapshot there.
"""

from __future__ import annotations

import argparse
import pickle
import random

import torch

KIB, MIB = 1 << 10, 1 << 20
SIZES = [100, 700, 4 * KIB, 100 * KIB, 600 * KIB, 1 * MIB, 1 * MIB + 512, 3 * MIB,
         7 * MIB + 300, 9 * MIB, 12 * MIB, 19 * MIB + 5, 25 * MIB, 33 * MIB + 777, 45 * MIB]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float, default=0.0)
    ap.add_argument("--pickle", default="")
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    torch.cuda.init()
    if args.fraction:
        torch.cuda.set_per_process_memory_fraction(args.fraction)
    if args.pickle:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    a = torch.ones(64, 64, device="cuda")
    product = a @ a   # cuBLAS: its workspace is memory outside the pool
    del a
    rng = random.Random(1234)
    side = torch.cuda.Stream()
    live: list = []
    for step in range(args.steps):
        size = rng.choice(SIZES) + rng.randrange(0, 4096)
        try:
            if rng.random() < 0.15:
                with torch.cuda.stream(side):
                    live.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
            else:
                t = torch.empty(size, dtype=torch.uint8, device="cuda")
                if rng.random() < 0.2:
                    t.record_stream(side)   # used on the side stream: its free waits
                live.append(t)
        except torch.OutOfMemoryError:
            print("oom_at", step + 1, size, flush=True)
            break
        # free out of order, keeping the live set around 20 tensors
        while len(live) > 20 or (live and rng.random() < 0.3):
            live.pop(rng.randrange(len(live)))
        # the side stream's events complete before the next allocation polls
        # them: a block freed while used there comes back at that allocation,
        # in every run (without this, when it comes back races with the
        # device, and runs differ from one another)
        side.synchronize()
        if step % 97 == 96:
            torch.cuda.empty_cache()
    del live, product
    torch.cuda.synchronize()
    print("max_reserved", torch.cuda.max_memory_reserved(), flush=True)
    print("max_allocated", torch.cuda.max_memory_allocated(), flush=True)
    if args.pickle:
        snap = torch.cuda.memory._snapshot()
        with open(args.pickle, "wb") as f:
            pickle.dump(snap, f, protocol=4)


if __name__ == "__main__":
    main()
