"""A training loop under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
run by test_torch_on_sim in its own process (the setting is read when the
allocator starts). Prints one JSON object: what PyTorch and the simulated
device said at each point."""

from __future__ import annotations

import json

import torch

import mlp
import simdev

MIB = 1 << 20
torch.backends.cudnn.enabled = False


def used() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def point() -> dict:
    c = simdev.counters()
    return {"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated(),
            "used": used(), "vmm_create": c["vmm_create_calls"],
            "vmm_release": c["vmm_release_calls"], "mem_alloc": c["mem_alloc_calls"]}


torch.cuda.init()
out: dict = {"start": point()}
model = mlp.make_model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
steps = []
for _ in range(5):
    mlp.train(model, opt, steps=1)
    torch.cuda.synchronize()
    steps.append(point())
out["steps"] = steps
out["expandable_segments"] = [s["is_expandable"] for s in torch.cuda.memory_snapshot()]

# A large tensor grows the large pool's segment (no new segment: more of it
# mapped); freeing it and emptying the cache unmaps those pages while the
# model's tensors keep the segment, which a fixed-size segment cannot do.
big = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
out["big_held"] = point()
out["big_held"]["segments"] = len(torch.cuda.memory_snapshot())
del big
torch.cuda.empty_cache()
out["big_freed"] = point()
out["big_freed"]["segments"] = len(torch.cuda.memory_snapshot())
del model, opt
torch.cuda.synchronize()
torch._C._cuda_clearCublasWorkspaces()
torch.cuda.empty_cache()
out["end"] = point()
print(json.dumps(out))
