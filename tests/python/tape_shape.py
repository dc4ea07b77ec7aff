"""A hand-written autograd tape that keeps every intermediate until the end
of the step, and its fixed twin.

Run as ``python tape_shape.py leak|fixed OUT.vtsnap [cuda]`` (cuda: on the
simulated CUDA device): a manual forward records each layer's activation on
a tape, a manual backward walks the tape in reverse (each activation's last
use is its own layer's backward) and stacks the per-layer weight gradients at
the end, where the step peaks.
The leak clears the tape only at the end of the step, so every activation
whose backward already ran is still alive at that peak; the fixed twin
drops each tape entry once its backward has run (and the forward's last
output once backward started from it). Prints one JSON line: the step
count and the activations' bytes.
"""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import torch

import vramtrace
import vramtrace.torch as vtt

STEPS, LAYERS, B, D = 6, 6, 64, 128


class Tape:
    def __init__(self) -> None:
        self.entries: List[Optional[torch.Tensor]] = []


def step(w: torch.Tensor, x: torch.Tensor, fixed: bool, tape: Tape) -> torch.Tensor:
    a = x
    tape.entries.append(a)
    for _ in range(LAYERS):
        a = torch.tanh(a @ w)
        tape.entries.append(a)
    g = 2 * a                        # d(sum a^2) / da
    if fixed:
        del a                        # the tape holds it for its backward
    gws = []
    for k in range(LAYERS, 0, -1):
        ak = tape.entries[k]
        gpre = g * (1 - ak * ak)
        del ak
        if fixed:
            tape.entries[k] = None   # its backward ran: nothing reads it again
        gws.append(tape.entries[k - 1].t() @ gpre)
        g = gpre @ w.t()
        del gpre
    gw = torch.stack(gws).sum(0)     # the step's peak: every layer's gradient
    tape.entries.clear()
    return gw


def main() -> None:
    fixed = sys.argv[1] == "fixed"
    if sys.argv[3:4] == ["cuda"]:
        torch.set_default_device("cuda")
    torch.manual_seed(0)
    w = torch.randn(D, D) * 0.1
    tape = Tape()
    # No holder walks: they run at marks, when the tape is empty, and their
    # time would count in the step the rule measures.
    with vtt.track(walk=False):
        for i in range(STEPS):
            vtt.mark(f"step {i}")
            x = torch.randn(B, D)
            gw = step(w, x, fixed, tape)
            w -= 1e-3 * gw
            del gw, x
        vtt.mark("end")
        vramtrace.snapshot(sys.argv[2])
    print(json.dumps({"steps": STEPS, "activation_bytes": B * D * 4}))


if __name__ == "__main__":
    main()
