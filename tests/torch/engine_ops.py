"""Backward ops on the autograd engine's device thread, seen two ways.

  python engine_ops.py OUT.json [NEST]   (on the simulated device: simrun)

The same small training loop (a Linear/LayerNorm model whose hidden
activation's gradient and parameters' gradients are kept each step) runs twice under track(): as users
run it, where the op observer hands the engine thread's ops to the C
recording (Dispatcher.observed_engine) with the forward op's frames lent,
and through the dispatch mode, which runs them under functions named after
those frames and hands them to the same recording (Dispatcher.engine_op).
The observer's way runs once more with the extension's table of the frames
to lend left out (native/trackfast/lent.c), so that every engine op's
frames are asked of the tracker's Python (Tracker._engine_frames).
OUT.json gets, for each way, how ops were seen and how many, how many times
the observer asked Python for the frames to lend, the records of the tensors alive at the end in creation order
(name, whether a view, the epoch their storage was last used in, from the
last), the names of the kept gradients and how many of each kind a step
keeps, the ops recorded by a flush right after the first backward (the
engine's, held back by the observer), and the line of the forward op
the activation's gradients differentiate.

NEST (default 0) wraps the model in that many more torch.nn.Sequential,
as a library's model is called through its own layers: each adds three of
torch's Python frames between the program's forward line and the ops, so
that with NEST 6 the line is more than 16 frames out (about as deep as
PyTorch's and Hugging Face's modules put a GPT-2 block's ops).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

import torch

import vramtrace.torch as vtt
from vramtrace import _trackobs

STEPS, ROWS, D = 3, 16, 64
FORWARD_LINE = 0
NEST = int(sys.argv[2]) if len(sys.argv) > 2 else 0


def loop(tr: Any) -> Dict[str, Any]:
    global FORWARD_LINE
    asked = [0]
    engine_frames = tr._engine_frames

    def counted(seq: int) -> int:
        asked[0] += 1
        return engine_frames(seq)
    tr._engine_frames = counted
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.LayerNorm(D))
    for _ in range(NEST):
        model = torch.nn.Sequential(model)
    model = model.cuda()
    head = torch.nn.Linear(D, 1).cuda()
    kept: List[torch.Tensor] = []
    with tr:
        for step in range(STEPS):
            vtt.mark(f"step {step}")
            x = torch.randn(ROWS, D, device="cuda")
            FORWARD_LINE = sys._getframe().f_lineno + 1
            h = torch.relu(model(x))
            h.retain_grad()
            head(h).square().mean().backward()
            if step == 0:   # the ops recorded by the flush after the backward
                held = tr.ops
                tr._fast.flush()
                held = tr.ops - held
            kept.append(h.grad)
            kept.extend(p.grad for p in [*model.parameters(), *head.parameters()])
            model.zero_grad(set_to_none=True)
            head.zero_grad(set_to_none=True)
            del x, h
        tr._fast.flush()
        recs = sorted(tr._by_tid.items())
        alive = [[r.name, bool(r.base), tr._storages[r.skey].last_epoch - tr.epoch]
                 for _, r in recs if r.skey in tr._storages]
        grads = [tr._by_obj[id(g)].name if id(g) in tr._by_obj else None for g in kept]
    return {"observer": tr.ops_seen_by == "observer", "ops": tr.ops, "asked": asked[0],
            "errors": tr.errors, "alive": alive, "grads": grads, "steps": STEPS, "held": held,
            # h.grad, then the model's parameters' grads, then the head's
            "kept_per_step": [1, len(list(model.parameters())), len(list(head.parameters()))]}


def main() -> None:
    out: Dict[str, Any] = {}
    out["c"] = loop(vtt.track())

    # The observer without the table: every engine op asks Python.
    install = _trackobs.Observer.install

    def without_table(self: Any, *args: Any, **kw: Any) -> None:
        install(self, *args[:6], **kw)   # lent_reader, lent_table, marking left out
    _trackobs.Observer.install = without_table
    try:
        out["c_untabled"] = loop(vtt.track())
    finally:
        _trackobs.Observer.install = install

    # The same through the dispatch mode (VRAMTRACE_TRACK_OBSERVER=0).
    wanted = _trackobs.wanted
    _trackobs.wanted = lambda: False
    try:
        out["mode"] = loop(vtt.track())
    finally:
        _trackobs.wanted = wanted
    out["forward_line"] = FORWARD_LINE
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
    # Ends without Python's finalization: this program ends right after a
    # CUDA backward, where PyTorch 2.14 can abort at exit (its engine thread
    # drops the backward's context while the interpreter finalizes; with or
    # without vramtrace: docs/limitations.md). What it checks is written above.
    sys.stdout.flush()
    os._exit(0)
