"""Backward ops on the autograd engine's device thread, recorded two ways.

  python engine_ops.py OUT.json        (on the simulated device: simrun)

The same small training loop (a Linear/LayerNorm model whose hidden
activation's gradient and parameters' gradients are kept each step) runs twice under track(): as users
run it, where the op observer hands the engine thread's ops to the C
recording (Dispatcher.observed_engine), and with those ops handed to the
tracker's Python recording instead (Tracker._on_op as a backward op, with
the same stack lent). OUT.json gets, for each way, the ops each path
recorded, the records of the tensors alive at the end in creation order
(name, whether a view, the epoch their storage was last used in, from the
last) and the names of the kept gradients, and the line of the forward op
the activation's gradients differentiate.
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


def loop(tr: Any) -> Dict[str, Any]:
    global FORWARD_LINE
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.LayerNorm(D)).cuda()
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
            kept.append(h.grad)
            kept.extend(p.grad for p in [*model.parameters(), *head.parameters()])
            model.zero_grad(set_to_none=True)
            head.zero_grad(set_to_none=True)
            del x, h
        tr._flush()
        recs = sorted(tr._by_tid.items())
        alive = [[r.name, bool(r.base), tr._storages[r.skey].last_epoch - tr.epoch]
                 for _, r in recs if r.skey in tr._storages]
        grads = [tr._by_obj[id(g)].name if id(g) in tr._by_obj else None for g in kept]
    return {"observer": tr.ops_seen_by == "observer",
            "py_ops": tr._py_ops, "c_ops": tr._fast.ops if tr._fast is not None else 0,
            "errors": tr.errors, "alive": alive, "grads": grads}


def main() -> None:
    out: Dict[str, Any] = {}
    out["c"] = loop(vtt.track())

    # The engine thread's ops to the Python recording, as a backward op of
    # the stack lent (what track() did before they took the C path).
    tr = vtt.track()
    install = _trackobs.Observer.install

    def via_python(self: Any, on_owner: Any, on_other: Any, *rest: Any) -> None:
        def on_engine(func: Any, args: Any, outs: Any, facts: bytes, stack: int) -> None:
            tr._on_op(func, args, None, outs, False, stack if tr._stacks.enabled else 0)
        install(self, on_owner, on_engine, *rest)
    _trackobs.Observer.install = via_python
    try:
        out["python"] = loop(tr)
    finally:
        _trackobs.Observer.install = install
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
