"""The differential corpus, continued (diff_corpus.py runs it): data loading
and processes, where the model is built, what a program raises, what it can
see of torch's machinery, threads and the garbage collector."""

from __future__ import annotations

import contextlib
import contextvars
import gc
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from diff_recorder import Recorder, _seed, _train, program  # noqa: F401


# --- data loading, processes -------------------------------------------------

class _Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.full((3,), float(i)), torch.tensor(i * i)


@program()
def dataloader_workers(r: Recorder) -> None:
    import multiprocessing
    _seed(r)
    with r.tracked():
        model = nn.Linear(3, 1).to(r.dev)
        loader = torch.utils.data.DataLoader(
            _Squares(), batch_size=4, shuffle=True, num_workers=2,
            pin_memory=r.cuda, multiprocessing_context=multiprocessing.get_context("fork"),
            generator=torch.Generator().manual_seed(1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for x, y in loader:
            r.note(x.is_pinned())
            r.val([x, y])
            x, y = x.to(r.dev, non_blocking=True), y.to(r.dev).float()
            opt.zero_grad()
            loss = F.mse_loss(model(x).squeeze(1), y)
            loss.backward()
            opt.step()
            r.val(loss)
        r.val(list(model.parameters()))
    r.mem("after")


def _add_in_child(t: torch.Tensor, q: Any, done: Any) -> None:
    t.add_(1)
    q.put(t * 2)
    done.wait(60)   # the tensor's memory is handed over while this process lives


@program("cpu")
def multiprocessing_sharing(r: Recorder) -> None:
    import torch.multiprocessing as mp
    _seed(r)
    with r.tracked():
        ctx = mp.get_context("fork")
        t = torch.zeros(4).share_memory_()
        q, done = ctx.Queue(), ctx.Event()
        p = ctx.Process(target=_add_in_child, args=(t, q, done))
        p.start()
        got = q.get(timeout=60)
        done.set()
        p.join(60)
        r.note(p.exitcode)
        r.val([t, got])


# --- where the model is built --------------------------------------------------

@program()
def model_built_before(r: Recorder) -> None:
    _seed(r)
    model = nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6), nn.Linear(6, 2)).to(r.dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(3, 6, device=r.dev), torch.randn(3, 2, device=r.dev)
    _train(r, model, x, y, steps=1, opt=opt)
    with r.tracked():
        _train(r, model, x, y, steps=2, opt=opt)
    _train(r, model, x, y, steps=1, opt=opt)
    r.mem("after")


@program()
def model_rebuilt_inside(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(6, 6), nn.Linear(6, 2)).to(r.dev)
        x, y = torch.randn(3, 6, device=r.dev), torch.randn(3, 2, device=r.dev)
        _train(r, model, x, y, steps=1)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        r.mem("first model")
        del model
        model = nn.Sequential(nn.Linear(6, 6), nn.Linear(6, 2)).to(r.dev)   # rebuilt
        model.load_state_dict(state)
        model.requires_grad_(True)
        _train(r, model, x, y, steps=1)
        model.to(torch.float64)
        r.val(list(model.parameters()))
        model.half().float()
        r.val(list(model.parameters()))
    r.mem("after")


# --- what a program raises -----------------------------------------------------

@program()
def errors(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        lin = nn.Linear(4, 2).to(r.dev)
        for bad in (lambda: lin(torch.randn(3, 5, device=r.dev)),
                    lambda: lin.weight.add_(1),
                    lambda: torch.randn(2, device=r.dev)[5],
                    lambda: torch.cat([torch.ones(2, device=r.dev),
                                       torch.ones(2, 2, device=r.dev)])):
            try:
                bad()
                r.note("no error")
            except Exception as exc:   # noqa: BLE001 - its type and text are compared
                r.note(f"{type(exc).__name__}: {exc}")
        y = lin(torch.randn(1, 4, device=r.dev)).sum()
        y.backward()
        try:
            y.backward()   # the graph is freed
        except RuntimeError as exc:
            r.note(str(exc))
        r.mem("errors")
        raise ValueError("the program's own error")


@program("cuda")
def out_of_memory(r: Recorder) -> None:
    with r.tracked():
        keep = torch.empty(1 << 20, device=r.dev)
        r.mem("kept")
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device=r.dev)
        except torch.OutOfMemoryError as exc:
            r.note(f"{type(exc).__name__}: {exc}")
        r.mem("after oom")
        del keep
    r.mem("after")


# --- what a program can see of torch's machinery -----------------------------

@program("cpu")
def compile_counting_backend(r: Recorder) -> None:
    import torch._dynamo
    torch._dynamo.reset()
    graphs: List[str] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(",".join(getattr(n.target, "__name__", "?") for n in gm.graph.nodes
                               if n.op == "call_function"))
        return gm.forward

    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
        cm = torch.compile(model, backend=backend, fullgraph=True)
        x = torch.randn(3, 4)
        r.val(cm(x))
        r.val(cm(x * 2))

        @torch.compile(backend=backend)
        def f(a: torch.Tensor) -> torch.Tensor:
            r.note(torch.compiler.is_compiling())
            return a.sin() + 1

        r.val(f(x))
    r.note(graphs)
    torch._dynamo.reset()


class _Printing(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        print("dispatch", func)
        return func(*args, **(kwargs or {}))


class _PrintingFunctions(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        print("function", getattr(func, "__name__", "?"))
        return func(*args, **(kwargs or {}))


@program()
def the_programs_own_modes(r: Recorder) -> None:
    from torch.utils.flop_counter import FlopCounterMode
    _seed(r)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)).to(r.dev)
    x = torch.randn(2, 4, device=r.dev)
    with _Printing():
        with r.tracked():
            model(x).sum().backward()
    with _PrintingFunctions():
        with r.tracked():
            model(x).sum().backward()
    with torch.device(r.dev):   # a function mode that puts factories on the device
        with r.tracked():
            r.val(torch.ones(3))
    r.mem("device context")
    with r.tracked():
        with _Printing():
            model(x).sum().backward()
        with FlopCounterMode(display=False) as fc:
            model(x).sum().backward()
        r.note(fc.get_total_flops())


@program()
def profiler(r: Recorder) -> None:
    _seed(r)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)).to(r.dev)
    x = torch.randn(2, 4, device=r.dev)
    with r.tracked():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with torch.profiler.record_function("step"):
                model(x).sum().backward()
        r.note(sorted((e.key, e.count) for e in prof.key_averages()))


@program()
def saved_tensor_hooks_and_refs(r: Recorder) -> None:
    import weakref
    _seed(r)
    with r.tracked():
        packed: List[Any] = []

        def pack(t: torch.Tensor) -> Any:
            packed.append([t.requires_grad, t.grad_fn is None, t._base is None,
                           t.is_leaf, tuple(t.shape)])
            return t.cpu() if r.cuda else t.clone()

        w = torch.randn(3, 3, device=r.dev, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t.to(r.dev)):
            y = (w @ w).relu()
            z = y.exp()
        r.note(packed)
        z.sum().backward()
        r.val(w.grad)
        r.note([w._version, y._version, z._version])
        a = torch.ones(4, device=r.dev)
        ref = weakref.ref(a)
        b = a.view(2, 2).add_(1)
        r.note(a._version)
        del a, b
        r.note(ref() is None)
        print(torch.arange(4.0) * 0.5, nn.Linear(2, 2))
        r.mem("after")


@program()
def error_in_backward_hook(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        x = torch.randn(3, device=r.dev, requires_grad=True)
        y = (x * 2).sum()

        def bad(g: torch.Tensor) -> None:
            raise KeyError("from a hook")

        x.register_hook(bad)
        y.backward()


@program()
def saved_tensors_unpacked_by_the_program_only(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        calls = {"pack": 0, "unpack": 0}

        def pack(t: torch.Tensor) -> Any:
            calls["pack"] += 1
            return t

        def unpack(t: torch.Tensor) -> torch.Tensor:
            calls["unpack"] += 1
            print("unpack", tuple(t.shape))
            return t.clone()   # an allocation on each unpack

        w = torch.randn(4, 4, device=r.dev, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            h = (w @ w).tanh()
            loss = (h * h).sum()
        r.mark("forward")      # the graph alive at a mark: walked from its nodes
        r.snapshot()
        r.mem("marked")
        r.note(dict(calls))
        loss.backward()
        r.note(dict(calls))
        r.val(w.grad)
        r.mem("after")


@program()
def storages_moved_and_freed(r: Recorder) -> None:
    import sys as _sys
    _seed(r)
    with r.tracked():
        p = nn.Parameter(torch.randn(64, 64, device=r.dev))
        r.note(_sys.getrefcount(p))
        full = p.detach().clone()
        p.untyped_storage().resize_(0)        # FSDP frees a sharded parameter so
        r.mem("freed")
        r.mark("freed")
        p.untyped_storage().resize_(full.nbytes)
        p.data.copy_(full)
        r.mem("restored")
        a = torch.arange(6.0, device=r.dev)
        b = torch.zeros(2, device=r.dev)
        b.set_(a.untyped_storage(), 2, (2,), (1,))
        r.val(b)
        c = torch.ones(3, device=r.dev)
        c.data = torch.full((5,), 2.0, device=r.dev)
        r.val(c)
        lazy = torch._lazy_clone(a)          # copy-on-write until written
        r.mark("lazy")
        r.note(torch._C._data_address(lazy) == torch._C._data_address(a))
        r.mem("lazy clone")
        lazy.add_(1)
        r.note(torch._C._data_address(lazy) == torch._C._data_address(a))
        r.val([a, lazy])
        r.note(_sys.getrefcount(p))
        del full
        r.mem("after")


@program()
def threads(r: Recorder) -> None:
    import threading
    _seed(r)
    model = nn.Linear(8, 8).to(r.dev)
    x = torch.randn(4, 8, device=r.dev)
    outs: Dict[int, Any] = {}

    def work(i: int, tracked: bool) -> None:
        # no matrix product: which cuBLAS handle (and workspace) a new
        # thread gets from PyTorch's pool depends on when the last one let go
        with (r.tracked() if tracked else contextlib.nullcontext()):
            with torch.no_grad():
                outs[i] = (x * i).relu().sum(0)

    with r.tracked():
        for i in range(3):
            t = threading.Thread(target=work, args=(i, i == 1))
            t.start()
            t.join()
        out = model(x)
        out.sum().backward()
    r.val([outs[i] for i in range(3)] + [out, model.weight.grad])
    r.mem("after")


class _Node:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.me = self   # a reference cycle


@program("cuda")
def cycles_freed_by_the_automatic_gc(r: Recorder) -> None:
    # When a dropped cycle goes depends on the collector's schedule: the
    # allocations of container objects since the last collection.
    gc.collect()
    w = torch.randn(16, 16, device=r.dev, requires_grad=True)
    with r.tracked():
        for i in range(12):
            _Node(torch.empty(1 << 16, device=r.dev))
            for _ in range(4):
                (w @ w).relu().sum().backward()
            r.mem(f"step {i}")


def _settled_count() -> int:
    """gc.get_count()[0] once the autograd engine's device thread is done:
    it lets the backward's graph go after backward() has returned (its
    contextvars.Context, and tensors that have Python objects), so an
    early read would count some of those frees in the next step. Read
    until it stays the same for several reads (at most 0.5 s)."""
    deadline = time.perf_counter() + 0.5
    last, same = gc.get_count()[0], 0
    while same < 5 and time.perf_counter() < deadline:
        time.sleep(0.002)
        now = gc.get_count()[0]
        same = same + 1 if now == last else 0
        last = now
    return last


def _fill_free_lists() -> None:
    """Put some lists, dicts, tuples of each size and contexts on
    CPython's free lists. A container taken from a free list is not counted
    as made, nor one put back as freed: a step run with them empty (as
    gc.collect() leaves them) counts what it makes at its peak, which
    depends on when the autograd engine's thread let its objects go; with
    some on hand, what a step makes and frees stays off the count whatever
    the order."""
    made: List[Any] = [[] for _ in range(40)]
    made += [{} for _ in range(40)]
    made += [contextvars.copy_context() for _ in range(40)]
    made += [tuple(range(n)) for n in range(1, 21) for _ in range(40)]
    del made


@program()
def the_collectors_count_moves_per_step_as_untracked(r: Recorder) -> None:
    # What paces the cyclic collector: the count of container objects made
    # less those freed. track() keeps its own work out of it
    # (scripts/vramtrace/native/trackfast/gc_schedule.c): each step of forward ops, views,
    # copies, a dropped reference cycle and a backward moves it as untracked.
    # (Where it stands when the program starts differs with what the process
    # imported and left in the free lists: compared are the steps.)
    w = torch.randn(16, 16, device=r.dev, requires_grad=True)
    threshold = gc.get_threshold()
    with r.tracked():
        gc.collect()
        gc.set_threshold(1 << 30)   # no collection in between: the counts compared
        _fill_free_lists()
        try:
            counts = []
            for _ in range(6):
                x = w @ w
                y = x.relu()
                v = x[2:5].t().contiguous()
                u = torch.cat([v, v, y[:, :1]], 1)
                _Node(u)
                u.sum().backward()
                del x, y, v, u
                counts.append(_settled_count())
        finally:
            gc.set_threshold(*threshold)
            gc.collect()
    # the first steps warm PyTorch's and the tracker's caches
    r.seen.append(["count per step", [b - a for a, b in zip(counts[2:], counts[3:])]])


@program("cuda")
def cycles_freed_by_gc(r: Recorder) -> None:
    gc.collect()
    with r.tracked():
        for i in range(3):
            _Node(torch.empty(1 << 18, device=r.dev))
            r.mem(f"cycle {i}")
        gc.collect()
        r.mem("collected")
