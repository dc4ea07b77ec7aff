"""Sentence embeddings as extraction scripts take them: each batch's
first-token vector, ``out[:, 0]`` of an encoder's [B, T, H] output, kept on
the device for a torch.cat at the end. Each kept row is a view: it keeps
its batch's whole output (1 MiB for 8 KiB here). No optimizer, so no mark;
about three seconds of batches. ``fixed``: ``.clone()`` of the row;
``detached``: the row of ``out.detach()`` (its ``_base`` is the detached
tensor, which shares the output's storage without being a view).
Prints "embeddings (N, H)" last."""

from __future__ import annotations

import sys
import time

import torch

kept = []


def encode(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(table[ids], (table.shape[1],))


def main(kind: str) -> None:
    torch.manual_seed(0)
    table = torch.randn(512, 128, device="cuda")
    with torch.no_grad():
        for _ in range(20):
            ids = torch.randint(0, 512, (16, 128), device="cuda")
            out = encode(ids, table)
            if kind == "detached":
                cls = out.detach()[:, 0]
            else:
                cls = out[:, 0]
            kept.append(cls.clone() if kind == "fixed" else cls)
            time.sleep(0.15)   # the encoder's own time on a real device
    print("embeddings", tuple(torch.cat(kept).shape))


if __name__ == "__main__":
    main(sys.argv[1])
