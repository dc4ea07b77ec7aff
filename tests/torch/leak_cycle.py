"""A reference-cycle leak with CUDA tensors, and its fix.

  python leak_cycle.py leak|fixed OUT.json SNAPSHOT [--steps N]

Each step makes two objects that point at each other, each holding an
8 MiB CUDA tensor, then drops them. With gc disabled (a long-lived program
whose cycles sit in the oldest generation) the leaking version keeps every
pair until the device is full and PyTorch raises OutOfMemoryError; the fixed
version links them with weak references and runs flat. Run under
`PYTORCH_NO_CUDA_MEMORY_CACHING=1 vramtrace run`: every tensor is an
allocation vramtrace serves and, on a full device, refuses with
cudaErrorMemoryAllocation. Uncached, PyTorch checks cudaMalloc like any
CUDA call and raises torch.AcceleratorError "CUDA error: out of memory"
(its caching allocator raises torch.OutOfMemoryError instead; through
use_allocator() it is a RuntimeError). vramtrace.torch.track() and a mark at every
step let `vramtrace check SNAPSHOT` judge the storages.
"""

from __future__ import annotations

import gc
import json
import weakref

import torch

import vramtrace
import vramtrace.torch as vtt

from cycle_args import parse_cycle_args

MIB = 1 << 20


class Node:
    def __init__(self, buf: torch.Tensor) -> None:
        self.buf = buf
        self.other = None


def main() -> None:
    args = parse_cycle_args(default_steps=40)
    gc.disable()
    result = {"kind": args.kind, "oom_at_step": None, "oom_error": "", "bytes_per_step": []}
    # collect_cycles=False: the tracker must not run the collection gc.disable() turned off.
    with vtt.track(collect_cycles=False):
        for step in range(args.steps):
            vtt.mark(f"step {step}")
            try:
                a = Node(torch.empty(8 * MIB, dtype=torch.uint8, device="cuda"))
                b = Node(torch.empty(8 * MIB, dtype=torch.uint8, device="cuda"))
            except (torch.OutOfMemoryError, torch.AcceleratorError) as exc:
                if "out of memory" not in str(exc):
                    raise
                result["oom_at_step"] = step
                result["oom_error"] = type(exc).__name__
                break
            if args.kind == "leak":
                a.other, b.other = b, a
            else:
                a.other, b.other = weakref.ref(b), weakref.ref(a)
            del a, b
            result["bytes_per_step"].append(vramtrace.stats(0)["allocated_bytes"]["all"]["current"])
        vtt.mark("end")
        vramtrace.snapshot(args.snapshot)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
