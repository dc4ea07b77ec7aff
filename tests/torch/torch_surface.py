"""PyTorch's memory surface, exercised by a program that never imports
vramtrace: two devices, a thread of its own, DataLoader workers (fork and
spawn) with pinned batches, empty_cache(). Prints PyTorch's own figures after
each part, one line each, so that a run with and without `vramtrace run`
can be compared line for line (test_torch_observed_recording.py).

  python torch_surface.py
"""

import threading

import torch
from torch.utils.data import DataLoader, TensorDataset


def figures(tag: str) -> None:
    for d in range(torch.cuda.device_count()):
        st = torch.cuda.memory_stats(d)
        print(tag, d, torch.cuda.memory_allocated(d), torch.cuda.memory_reserved(d),
              torch.cuda.max_memory_allocated(d), st["allocation.all.allocated"],
              st["segment.all.allocated"], st["segment.all.freed"], flush=True)


def on_device(d: int, keep: list) -> None:
    with torch.cuda.device(d):
        a = torch.randn(256, 256, device=f"cuda:{d}")
        keep.append(a @ a)                      # kept: alive at the end
        b = torch.empty(3 << 20, device=f"cuda:{d}", dtype=torch.uint8)
        del b


def main() -> None:
    torch.backends.cudnn.enabled = False
    torch.manual_seed(0)
    kept: list = []
    for d in range(torch.cuda.device_count()):
        on_device(d, kept)
    figures("devices")

    t = threading.Thread(target=on_device, args=(0, kept))
    t.start()
    t.join()
    figures("thread")

    data = TensorDataset(torch.arange(64, dtype=torch.float32).reshape(16, 4))
    for ctx in ("fork", "spawn"):
        loader = DataLoader(data, batch_size=4, num_workers=2, pin_memory=True,
                            multiprocessing_context=ctx)
        total = 0.0
        for (batch,) in loader:
            total += float(batch.cuda(non_blocking=True).sum())
        torch.cuda.synchronize()
        print("loader", ctx, total, flush=True)
    figures("loader")

    torch.cuda.empty_cache()
    figures("empty_cache")
    print("kept", len(kept))


if __name__ == "__main__":
    main()
