"""PyTorch's other ways of holding device memory, in a program that never
imports vramtrace: expandable segments (run it with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) and a CUDA graph's private
pool. Prints PyTorch's figures after each part, for a run with and without
`vramtrace run` to be compared line for line (test_torch_observed_recording.py).

  python torch_pools.py expandable|graph
"""

import sys

import torch


def figures(tag: str) -> None:
    print(tag, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(),
          torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(), flush=True)


def expandable() -> object:
    torch.backends.cudnn.enabled = False
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(4):
        out = model(torch.randn(512, 256, device="cuda"))
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        figures(f"step{step}")
    big = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
    figures("big")
    del big
    torch.cuda.empty_cache()
    figures("empty_cache")
    return model, opt, out


def graph() -> object:
    x = torch.ones(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x * 2                                # warm-up on a side stream, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        z = x * 3 + 1
    figures("captured")
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    figures("replayed")
    del g, z
    torch.cuda.empty_cache()
    figures("released")
    return x


if __name__ == "__main__":
    # what the last figures count stays alive to the exit snapshot
    kept = {"expandable": expandable, "graph": graph}[sys.argv[1]]()
