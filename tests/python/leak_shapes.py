"""The leak shapes seen in the field, each with its fixed twin, as small
training loops under vramtrace.torch.track().

Run as ``python leak_shapes.py SHAPE leak|fixed OUT.vtsnap [rename] [collect] [cuda]``: runs
STEPS steps with a mark at the start of each, writes the snapshot, and prints
one JSON line: the storages the leak retains ({"0xADDR": nbytes}, those made
in the steps the checker can judge), and the holder the path must name.
``rename``: the shape names its big tensor only after it was recorded (a
rename, vt_tensor_name), where it supports that (view). ``collect``: the
tracker collects garbage cycles at each mark (track(collect_cycles=True)),
so every pair of the cycle shape is freed at the mark after its step and
walked as garbage first. ``cuda``: every
tensor is made on the (simulated) CUDA device (torch.set_default_device).
Each run is its own process: the recorder keeps one trace per process.
"""

from __future__ import annotations

import gc
import json
import sys
import weakref
from typing import Any, Dict, List, Set

import torch

import vramtrace
import vramtrace.torch as vtt

STEPS = 6
# feature size: the weight is D x D; a step's leak passes `check`'s floor of
# minor findings on the device too, where cuBLAS's workspaces make the peak
D = 256
B = 48          # batch rows


def storage_of(t: torch.Tensor):
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return st.data_ptr(), st.nbytes()


class Shape:
    """One scenario: step() returns the loss; retained() the leaked tensors
    of this step (whose storages the checker must flag)."""
    holder = ""
    rename = False    # name the leaked tensor after it was recorded
    # What flags the leak: "linger" judges storages made in a step followed
    # by a complete unused step; "cycle" (a collection freed them) every one.
    rule = "linger"
    state: Dict[str, Any] = {}   # attribute -> what makes it, per run

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.leaked: List[torch.Tensor] = []
        for name, make in self.state.items():
            setattr(self, name, make())

    def step(self, i: int, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


# 1. Two objects linking each other, each holding a tensor: freed only by gc.
class Peer:
    def __init__(self, act: torch.Tensor) -> None:
        self.act = act
        self.peer: Any = None


class CycleShape(Shape):
    holder = "Peer"
    rule = "cycle"      # the final gc.collect() frees every pair

    def step(self, i, x, w):
        h = x @ w
        a = Peer(h.detach() * 1.0)
        b = Peer(torch.tanh(h.detach()))
        if self.fixed:
            a.peer, b.peer = weakref.ref(b), weakref.ref(a)   # no cycle
        else:
            a.peer, b.peer = b, a
        self.leaked = [a.act, b.act]
        return h.relu().sum() + a.act.sum() * 0


# 2. A callback lambda captures `self`, which keeps the awaited tensor.
class AsyncRecv:
    def __init__(self, comm: "Comm", buf: torch.Tensor) -> None:
        self.buf = buf
        self.done = False
        comm.on_complete.append(lambda: self.finish())   # the lambda a path names

    def finish(self) -> None:
        self.done = True


_CALLBACK_LINE = AsyncRecv.__init__.__code__.co_firstlineno + 3   # its lambda's line


class Comm:
    def __init__(self) -> None:
        self.on_complete: List[Any] = []

    def progress(self, clear: bool) -> None:
        for cb in self.on_complete:
            cb()
        if clear:
            self.on_complete.clear()


class CallbackShape(Shape):
    holder = f"function <lambda at leak_shapes.py:{_CALLBACK_LINE}>"
    state = {"comm": Comm}

    def step(self, i, x, w):
        recv = AsyncRecv(self.comm, torch.empty(B, 2 * D).fill_(1.0))   # "received" buffer
        loss = (x @ w).relu().sum() + recv.buf.sum()
        self.comm.progress(clear=self.fixed)
        self.leaked = [recv.buf]
        return loss


# 3. A view keeps its base's whole storage alive after the base is dropped.
class ViewShape(Shape):
    holder = "history"
    state = {"history": list}   # List[torch.Tensor]

    def step(self, i, x, w):
        gathered = torch.cat([x @ w] * 4, dim=1)            # B x 4D, the big buffer
        loss = gathered.relu().sum()
        if self.rename:                 # recorded by relu() already: a rename
            vtt.name(gathered, "gathered buffer")
        first = gathered[:, :4]                              # B x 4
        if self.fixed:
            first = first.clone()
            self.history.append(first)
            self.history = self.history[-1:]                 # keep only what is read
            loss = loss + self.history[0].sum() * 0
        else:
            self.history.append(first)
        self.leaked = [gathered] if not self.fixed else []
        return loss


# 4. A pipeline context list keeps the sent tensors after their backward.
class PipeContext:
    def __init__(self) -> None:
        self.output_tensors: List[torch.Tensor] = []


class Pipeline:
    def __init__(self) -> None:
        self.contexts: List[PipeContext] = []

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx = PipeContext()
        h = x @ w
        sent = torch.sigmoid(h)
        ctx.output_tensors.append(h)
        ctx.output_tensors.append(sent)
        self.contexts.append(ctx)
        return sent.sum()


class PipelineShape(Shape):
    holder = "PipeContext"
    state = {"pipe": Pipeline}

    def step(self, i, x, w):
        loss = self.pipe.forward(x[: B // 2], w) + self.pipe.forward(x[B // 2:], w)
        self.leaked = [t for c in self.pipe.contexts[-2:] for t in c.output_tensors]
        return loss

    def after_backward(self) -> None:
        if self.fixed:
            self.pipe.contexts.clear()


# 5. A hook closure -> its cell -> a dict of intermediates -> the hook: a cycle.
def make_hook(fixed: bool):
    acts: Dict[str, Any] = {}

    def hook(name: str, t: torch.Tensor) -> None:
        acts[name] = t

    if not fixed:
        acts["hook"] = hook          # the cycle
    return hook


class HookShape(Shape):
    holder = "function hook"
    rule = "cycle"      # the final gc.collect() frees every dict

    def step(self, i, x, w):
        hook = make_hook(self.fixed)
        h = x @ w
        act = torch.relu(h) * 2.0
        hook("act", act)
        self.leaked = [act]
        return act.sum()


SHAPES = {"cycle": CycleShape, "callback": CallbackShape, "view": ViewShape,
          "pipeline": PipelineShape, "hook": HookShape}


def run(shape: str, fixed: bool, out: str, rename: bool = False,
        collect: bool = False) -> Dict[str, Any]:
    torch.manual_seed(0)
    expect: Dict[str, int] = {}
    walked: Set[str] = set()
    gc.disable()     # a long-lived program: these cycles sit in gen 2 for many steps
    # No time budget: these runs check what the walk finds, at every mark,
    # in steps far shorter than one heap pass (the budget's cost side is
    # measured by tests/bench/bench_track.py, and test_track_truth runs with
    # the default budget).
    with vtt.track(walk_fraction=None, collect_cycles=collect):
        w = vtt.name(torch.randn(D, D, requires_grad=True), "w")
        sc = SHAPES[shape](fixed)
        sc.rename = rename
        for i in range(STEPS):
            vtt.mark(f"step {i}")
            x = torch.randn(B, D)
            loss = sc.step(i, x, w)
            loss.backward()
            with torch.no_grad():
                w.sub_(0.01 * w.grad)
            w.grad = None
            if hasattr(sc, "after_backward"):
                sc.after_backward()
            # Made in checker step i+1: judged (linger), and walked for its
            # holders, when mark i+3 exists; a collection's victims are all
            # judged (cycle), named by their holders when they were walked.
            if not fixed and (i + 3 <= STEPS or sc.rule == "cycle"):
                expect.update((hex(p), n) for p, n in map(storage_of, sc.leaked))
            if not fixed and i + 3 <= STEPS:
                walked.update(hex(p) for p, _ in map(storage_of, sc.leaked))
            sc.leaked = []
            del x, loss
        gc.enable()
        gc.collect()
        vramtrace.snapshot(out)
    return {"expect": expect, "holder": SHAPES[shape].holder, "rule": SHAPES[shape].rule,
            "walked": sorted(walked)}


if __name__ == "__main__":
    if "cuda" in sys.argv[4:]:
        torch.set_default_device("cuda")
    res = run(sys.argv[1], sys.argv[2] == "fixed", sys.argv[3],
              rename="rename" in sys.argv[4:], collect="collect" in sys.argv[4:])
    print(json.dumps(res))
