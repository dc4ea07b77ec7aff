"""A training step that leaks one tensor per step at a known line.

  python py_leak.py WAY SNAPSHOT
  WAY: run (under `vramtrace run` with PYTORCH_NO_CUDA_MEMORY_CACHING=1;
  the snapshot is run's) or pluggable (vramtrace.torch.use_allocator(); the
  program writes SNAPSHOT). No track(): the Python frames in the snapshot's
  stacks come from the recorder alone. Prints {"file", "line"} of the leak.
"""

import json
import sys

import torch

kept = []


def step(model, x):
    y = model(x)
    y.sum().backward()
    line = sys._getframe().f_lineno + 1
    kept.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))
    return line


def main():
    way, snap = sys.argv[1], sys.argv[2]
    import vramtrace
    if way == "pluggable":
        import vramtrace.torch as vtt
        vtt.use_allocator()
    torch.backends.cudnn.enabled = False
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 8)).cuda()
    x = torch.randn(16, 64, device="cuda")
    for _ in range(3):
        line = step(model, x)
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if way == "pluggable":
        vramtrace.snapshot(snap)
    print(json.dumps({"file": __file__, "line": line}))


if __name__ == "__main__":
    main()
