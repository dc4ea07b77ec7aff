"""A transformer trained with FSDP2 (``fully_shard`` on each block and on
the root, built on the meta device and materialized with ``to_empty``), laid
out as pytorch/examples' distributed/FSDP2 example: a ``main()`` that trains,
and after each epoch evaluates a few batches. One rank (gloo, the simulated
device has no NCCL), so that it is one process. Knows nothing of vramtrace.

    python fsdp_eval_kept.py leak|fixed

leak: the evaluation runs with gradients on and keeps each batch's output
(its autograd graph with it) in a list local to ``main()``, freed when
``main()`` returns. fixed: under ``torch.no_grad()``, the predictions moved
to the host. Prints "kept N" last.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

DIM, HEADS, VOCAB, SEQ, BATCH = 64, 4, 512, 64, 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = nn.Linear(DIM, DIM, bias=False)
        self.norm2 = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, DIM // HEADS).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, DIM))
        return x + self.down(F.gelu(self.up(self.norm2(x))))

    def reset_parameters(self) -> None:
        for m in (self.norm1, self.qkv, self.proj, self.norm2, self.up, self.down):
            m.reset_parameters()


class Transformer(nn.Module):
    def __init__(self, layers: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h)).float()

    def reset_parameters(self) -> None:
        for m in (self.tok, self.pos, self.norm, self.head):
            m.reset_parameters()
        for block in self.blocks:
            block.reset_parameters()


def main(kind: str) -> int:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Transformer()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    model.to_empty(device="cuda")
    model.reset_parameters()
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    preds = []
    for epoch in range(3):
        model.train()
        for _ in range(8):
            x = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
            loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
            loss.backward()
            optim.step()
            optim.zero_grad()
        model.eval()
        for _ in range(3):
            x = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
            if kind == "leak":
                preds.append(model(x))   # EVAL_LINE: each output with its graph
            else:
                with torch.no_grad():
                    preds.append(model(x).argmax(-1).cpu())
    dist.destroy_process_group()
    return len(preds)


if __name__ == "__main__":
    print("kept", main(sys.argv[1]))
