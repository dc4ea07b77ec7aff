"""Large-pool blocks that PyTorch's caching allocator hands out whole (what
would be left of the free block is 1 MiB or less, not worth a split) next
to ones it splits (run with PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:20 too, where a
request of 20 MiB or more is never split); prints memory_allocated() after each step and the peak,
for test_torch_observed_recording to compare with what `vramtrace run` recorded.
Never imports vramtrace."""

import torch

MIB = 1 << 20


def empty(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


def show(step: str) -> None:
    torch.cuda.synchronize()
    print("allocated", step, torch.cuda.memory_allocated())


torch.cuda.init()
kept = {}
kept["a"] = empty(19 * MIB + MIB // 2)   # a fresh 20 MiB segment, 0.5 MiB left: whole
show("a")
kept["b"] = empty(4 * MIB)               # another 20 MiB segment: split, 16 MiB left
show("b")
del kept["a"]                            # a's 20 MiB free again
show("a freed")
kept["c"] = empty(19 * MIB + 200 * 1024)  # a's block, 0.8 MiB left: whole
show("c")
kept["d"] = empty(3 * MIB)               # from b's segment: split, 13 MiB left
show("d")
kept["e"] = empty(12 * MIB + MIB // 2)   # the 13 MiB: 0.5 MiB left, whole
show("e")
kept["f"] = empty(1000)                  # the small pool: its rounded request
show("f")
del kept["d"]
show("d freed")
kept["g"] = empty(2 * MIB + 512)         # d's 3 MiB block: just under 1 MiB left, whole
show("g")
kept["h"] = empty(40 * MIB)              # its own 40 MiB segment
del kept["h"]
show("h freed")
kept["i"] = empty(25 * MIB)              # h's block: split (15 MiB left); with
show("i")                                # max_split_size_mb:20, whole (40 MiB)
print("max_allocated", torch.cuda.max_memory_allocated())
