"""The MLP training loop in one of the three ways a PyTorch user meets
vramtrace, run as its own process by test_torch_vramtrace.py and the
benchmark. Writes one JSON file with what PyTorch, vramtrace and the
simulated device each counted.

  python train_way.py WAY OUT.json [--steps N] [--snapshot PATH]

WAY:
  uncached   run under `vramtrace run` with PYTORCH_NO_CUDA_MEMORY_CACHING=1:
             every tensor is a cudaMalloc that vramtrace serves
  pluggable  vramtrace.torch.use_allocator(): PyTorch's CUDAPluggableAllocator
             calls vt_malloc/vt_free (vramtrace is not preloaded)
  native     PyTorch's own caching allocator, alone or under `vramtrace run`,
             which observes it block by block
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import mlp
import simdev


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("way", choices=["uncached", "pluggable", "native"])
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--snapshot", default="")
    args = ap.parse_args()
    torch.backends.cudnn.enabled = False

    import vramtrace
    if args.way == "pluggable":
        import vramtrace.torch as vtt
        vtt.use_allocator()

    torch.cuda.init()
    c0 = simdev.counters()
    model = mlp.make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    params = mlp.param_block_bytes(model)
    nparams = len(list(model.parameters()))
    mlp.train(model, opt, args.steps)
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    # What the program holds now: parameters and AdamW's state. The cuBLAS
    # workspaces torch keeps per handle and stream are released first, so
    # the tensors are all that is left allocated.
    torch._C._cuda_clearCublasWorkspaces()
    tensors = [p for p in model.parameters()] + [
        t for st in opt.state.values() for t in st.values()
        if isinstance(t, torch.Tensor) and t.is_cuda]
    c1 = simdev.counters()

    out = {
        "way": args.way,
        "steps": args.steps,
        "param_bytes": params,
        "nparams": nparams,
        "sim": {k: c1[k] - c0[k] for k in ("mem_alloc_calls", "mem_free_calls", "allocs", "frees")},
        "sim_bytes_in_use": c1["bytes_in_use"],
        "sim_total": {k: c1[k] for k in ("mem_alloc_calls", "mem_free_calls", "allocs", "frees")},
        "alive_tensors": len(tensors),
        "alive_tensor_bytes": sum(t.untyped_storage().nbytes() for t in tensors),
        "preloaded": "libvramtrace" in os.environ.get("LD_PRELOAD", ""),
    }
    if args.way == "native":
        st = torch.cuda.memory_stats()
        out["torch"] = {
            "allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
            "max_reserved": torch.cuda.max_memory_reserved(),
            "segments": st["segment.all.current"],
            "segment_allocs": st["segment.all.allocated"],
            "segment_frees": st["segment.all.freed"],
            "allocations": st["allocation.all.allocated"],
        }
    if args.way == "pluggable" or out["preloaded"]:
        out["vramtrace"] = vramtrace.stats(0)
    if args.way == "pluggable":
        # PyTorch's own recorder has nothing to record with a pluggable allocator.
        try:
            torch.cuda.memory._record_memory_history()
            out["torch_history_error"] = ""
        except RuntimeError as exc:
            out["torch_history_error"] = str(exc).splitlines()[0]
    if args.snapshot:
        vramtrace.snapshot(args.snapshot)
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
