"""The apparatus of the differential corpus (diff_corpus.py): the registry
of programs, the Recorder a program reports what it observes to, the
trackers it runs under, and the helpers programs share."""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

# name -> (program, devices)
PROGRAMS: Dict[str, Tuple[Callable[["Recorder"], None], Tuple[str, ...]]] = {}


def program(*devices: str) -> Callable:
    """Register a program for ``devices`` (default: the CPU and the device)."""
    def register(fn: Callable) -> Callable:
        PROGRAMS[fn.__name__] = (fn, devices or ("cpu", "cuda"))
        return fn
    return register


class Recorder:
    """What a program observes, in order."""

    def __init__(self, dev: str, tracked: Callable[[], Any]) -> None:
        self.dev = dev
        self.cuda = dev == "cuda"
        self.tracked = tracked
        self.seen: List[Any] = []

    def val(self, x: Any) -> None:
        """A tensor's exact bytes on the CPU (its shape and dtype on the
        device, where they are all a kernel leaves), a float's hex."""
        if isinstance(x, torch.Tensor):
            t = x.detach()
            if t.is_sparse or t.layout != torch.strided:
                t = t.to_dense()
            if t.device.type == "meta" or self.cuda:
                self.seen.append(["tensor", list(t.shape), str(t.dtype), str(t.device.type)])
                if self.cuda:
                    self.mem("val")
                return
            if t.is_complex():
                t = torch.view_as_real(t)
            raw = t.contiguous().reshape(-1).view(torch.uint8)
            self.seen.append(["tensor", list(t.shape), str(t.dtype),
                              hashlib.sha1(bytes(raw.tolist())).hexdigest()])
        elif isinstance(x, float):
            self.seen.append(["float", x.hex()] if not self.cuda else ["float"])
        elif isinstance(x, (list, tuple)):
            for v in x:
                self.val(v)
        else:
            self.seen.append(repr(x))

    def note(self, x: Any) -> None:
        """A value that does not depend on what a kernel computed."""
        self.seen.append(x if isinstance(x, (int, str, bool, type(None))) else repr(x))

    def mem(self, label: str) -> None:
        """memory_allocated() on the device (nothing on the CPU)."""
        if self.cuda:
            self.seen.append([label, torch.cuda.memory_allocated()])

    def mark(self, label: str) -> None:
        """vramtrace.mark() where the program is tracked: the tracker's
        sweep and referrer walk run there (nothing untracked)."""
        if isinstance(self.tracked, _Trackers):
            import vramtrace
            vramtrace.mark(label)

    def snapshot(self) -> None:
        """vramtrace.snapshot() where the program is tracked (its walk)."""
        if isinstance(self.tracked, _Trackers):
            import tempfile
            import vramtrace
            with tempfile.TemporaryDirectory() as d:
                vramtrace.snapshot(os.path.join(d, "s.vtsnap"))


def _seed(r: Recorder) -> None:
    torch.manual_seed(0)


def _train(r: Recorder, model: nn.Module, x: Any, y: Any, steps: int = 2,
           opt: Any = None, loss_fn: Callable = F.mse_loss) -> None:
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        out = model(x) if not isinstance(x, tuple) else model(*x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        r.val(loss)
        r.mem("step")
        r.mark("step")
    for p in model.parameters():
        r.val(p)


class _Trackers:
    """track() for the programs, remembering the trackers made: how they
    saw ops and how many (reported apart from what the program observes)."""

    def __init__(self) -> None:
        import vramtrace.torch as vtt
        from vramtrace import _trackobs
        self._track = vtt.track
        self.made: List[Any] = []
        tick_s = os.environ.get("VT_DIFF_TICK_S")
        if tick_s:
            # By hand, a stress: a tick (a mark's work, a holder walk with
            # it) every VT_DIFF_TICK_S seconds of a program's ops instead of
            # every 0.5 s, for what a tick's walk may change that a program
            # sees (0.001 showed the_collectors_count_moves_per_step_as_untracked
            # moved by the autograd nodes a walk made: gc_reads.c)
            from vramtrace.torch import _tracker
            _tracker._TICK_S = float(tick_s)
        if _trackobs.wanted():
            # built (or found in VRAMTRACE_CACHE_DIR) before any program runs:
            # the one line on stderr that announces a build is not a program's
            _trackobs.load()

    def __call__(self) -> Any:
        # No time budget for the walk: it runs at every mark where it is due
        # (the same walks in every run), the strictest test of its reads.
        tr = self._track(walk_fraction=None)
        self.made.append(tr)
        return tr

    def report(self) -> dict:
        made, self.made = self.made, []
        # the program's first tracker (a second thread's own one takes the
        # mode while the first has the observer)
        return {"seen_by": [made[0].ops_seen_by, made[0]._fast is not None] if made else [],
                "ops": sum(t.ops for t in made), "errors": sum(t.errors for t in made)}


def _tracked_factory() -> Callable[[], Any]:
    if os.environ.get("VT_DIFF_TRACK", "0") == "0":
        return contextlib.nullcontext
    return _Trackers()
