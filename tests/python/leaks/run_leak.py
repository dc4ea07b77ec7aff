"""Run one leak program of this folder under vramtrace.torch.track().

``python run_leak.py PROGRAM leak|fixed OUT.vtsnap [cuda] [unbudgeted]`` imports
PROGRAM.py, runs its training loop for STEPS steps with a mark at the start
of each (the user's own labels, "iteration N"), writes the snapshot and prints
one JSON line: the storages the leak retains ({"0xADDR": nbytes}, those the
checker can judge: made in a step followed by two complete steps), the words
a user would look for in the holder path, and the process's own measurements.
Each run is its own process: the recorder keeps one trace per process.
With ``cuda`` every tensor the program makes is on the (simulated) CUDA
device (torch.set_default_device): the program is run by tests/torch under
``vramtrace run`` with PyTorch's cache off, so that a storage's life is the
allocator's own allocation and free. With ``unbudgeted`` the holder walks
run at every mark whatever they cost (``track(walk_fraction=None)``): these
programs' steps take milliseconds where a training step takes a good part of
a second, so with the default budget (a quarter of the program's own time)
their walks, a pass over the heap each, would wait for marks that six steps
never reach. What the budget allows is bench_track's matter; this runs what
the walks name.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
from typing import Any, Dict

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import vramtrace  # noqa: E402
import vramtrace.torch as vtt  # noqa: E402

STEPS = 6


def storage_key(t: torch.Tensor):
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def run(program: str, fixed: bool, out: str, budgeted: bool = True) -> Dict[str, Any]:
    mod = importlib.import_module(program)
    torch.manual_seed(0)
    expect: Dict[str, int] = {}
    gc.disable()     # a long-lived program: its cycles sit in gen 2 for many steps
    t0 = time.perf_counter()
    with (vtt.track() if budgeted else vtt.track(walk_fraction=None)) as tr:
        prog = mod.Program(fixed)
        for i in range(STEPS):
            vtt.mark(f"iteration {i}")
            prog.step(i)
            # Made in checker step i+1: judged when mark i+3 exists.
            if not fixed and i + 3 <= STEPS:
                for p, n in map(storage_key, prog.retained()):
                    if n:
                        expect[hex(p)] = n
            prog.forget_step()
        gc.enable()
        gc.collect()
        vramtrace.snapshot(out)
    return {"expect": expect, "holder": mod.Program.holder, "errors": tr.errors,
            "seconds": time.perf_counter() - t0}


if __name__ == "__main__":
    if "cuda" in sys.argv[4:]:
        torch.set_default_device("cuda")
    res = run(sys.argv[1], sys.argv[2] == "fixed", sys.argv[3], "unbudgeted" not in sys.argv[4:])
    print(json.dumps(res))
