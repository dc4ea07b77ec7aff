"""Programs that run out of device memory, for tests/torch/test_torch_oom.py.

    python oom_prog.py frag    fragmentation: 5 MiB blocks, one in four kept,
                               pin every 20 MiB segment; then 12 MiB tensors
                               (fits with expandable segments)
    python oom_prog.py leak    a training loop that keeps every step's
                               activation in a list, never using it again
                               (fits when the kept tensors are dropped)
    python oom_prog.py cycle   the same, each activation held by a reference
                               cycle the collector never ran for (fits with
                               a gc.collect() before the retry)
    python oom_prog.py first_step  a deep model's first forward, every
                               activation kept for its backward, runs out
                               (no optimizer step: no mark); with
                               VT_TEST_SLOW_SNAPSHOT_HOOK=SECONDS a snapshot
                               hook sleeps that long, as the holder walk of a
                               large heap takes
    python oom_prog.py big     more live tensors than the device holds
                               (nothing but a bigger device fits), after a
                               matrix product (cuBLAS's own workspace)
    python oom_prog.py weights a model made on the device, trained a few
                               steps, then a request the device cannot hold
                               (its weights are named as the model knows
                               them)
    python oom_prog.py evaluate  a framework's evaluation loop (an installed
                               library's: site-packages/minitrainer.py) that
                               concatenates every batch's predictions on the
                               device, as transformers' Trainer does
    python oom_prog.py retry   after a small step, one too big for the device,
                               its OutOfMemoryError caught and the step
                               retried with a quarter of the batch inside the
                               except clause, while the exception's traceback
                               keeps the first attempt's activations
                               (PyTorch's FAQ, "My out of memory exception
                               handler can't allocate memory"): the retry
                               runs out too
    python oom_prog.py retry_after  the same retried after the except clause
                               (fits)
    python oom_prog.py probe_kept  a probe that keeps a 64 MiB batch it made,
                               runs out (caught), then three training steps,
                               then a request the rest of the device cannot
                               hold: the probe's batch is still held, steps
                               after its OOM (no retry in a handler)
    python oom_prog.py library  PyTorch's cache holding most of the device in
                               blocks it freed, when the first matrix product
                               makes cuBLAS's handle (its own device memory,
                               outside PyTorch's cache, which PyTorch does not
                               give back for it): CUBLAS_STATUS_ALLOC_FAILED
    python oom_prog.py library_emptied  the same with torch.cuda.empty_cache()
                               before the product (fits)
    python oom_prog.py graph   a step captured in a CUDA graph (its private
                               pool keeps 64 MiB, half of it free once the
                               capture ends) and replayed, then a request
                               the rest of the device cannot hold: PyTorch
                               gives a live graph's pool back for nothing
    python oom_prog.py graph_late  the same, the graph replayed 200 times
                               between small steps before the request
                               (more events than a small ring keeps: the
                               capture's are overwritten)
    python oom_prog.py graph_deleted  the same with the graph deleted
                               before the request (fits: PyTorch's retry
                               gives the pool's free segment back)
    python oom_prog.py graph_capture  the step's capture itself asks 200 MiB
                               (a buffer made inside the graph): PyTorch
                               serves it from the graph's private pool,
                               and the rest of the device cannot hold it
    python oom_prog.py mem_pool  a torch.cuda.MemPool the program made,
                               32 MiB asked into it, then 240 MiB
    python oom_prog.py compiled_graphs  a model compiled with
                               torch.compile(backend="cudagraphs") run a few
                               times (its cudagraph trees keep a private
                               pool, wholly free between calls), then a
                               request the rest of the device cannot hold
    python oom_prog.py compiled_graphs_reset  the same with
                               torch._dynamo.reset() before the request
                               (fits: the trees' pool is given back)
    python oom_prog.py late    a training loop of 300 small steps whose first
                               five keep 20 MiB each, then a request the rest
                               of the device cannot hold (more events than a
                               small ring keeps: what the first steps made is
                               held but overwritten)

Each prints "done" when it did not run out of memory; an out-of-memory
error ends it with PyTorch's exception, as it would end a training script.
With --torch-snapshot PATH, PyTorch's own recorder runs and its snapshot
(with the OOM) is dumped to PATH before the exception ends the program.
"""

from __future__ import annotations

import gc
import os
import sys

import torch

MIB = 1 << 20


def frag() -> None:
    blocks = [torch.empty(5 * MIB, dtype=torch.uint8, device="cuda") for _ in range(40)]
    kept = [b for i, b in enumerate(blocks) if i % 4 == 1]
    del blocks
    big = [torch.empty(12 * MIB, dtype=torch.uint8, device="cuda") for _ in range(9)]
    print("live", len(kept), len(big))


def leak() -> None:
    w = torch.nn.Parameter(torch.ones(1024, device="cuda"))
    opt = torch.optim.SGD([w], lr=0.1)
    history = []
    for _ in range(40):
        act = torch.empty(16 * MIB // 4, device="cuda") + w.sum()  # ACT_LINE
        history.append(act)
        loss = (w * 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()


class Node:
    """One half of a reference cycle."""


def cycle() -> None:
    """Each step's activation is held by a reference cycle that the
    collector (disabled, as a long gc pause would) never frees."""
    gc.disable()
    w = torch.nn.Parameter(torch.ones(1024, device="cuda"))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(40):
        a, b = Node(), Node()
        a.peer, b.peer = b, a
        a.act = torch.empty(16 * MIB // 4, device="cuda") + w.sum()  # CYCLE_LINE
        del a, b
        (w * 2).sum().backward()
        opt.step()
        opt.zero_grad()


def first_step() -> None:
    layers = [torch.nn.Linear(1024, 1024).cuda() for _ in range(4)]
    x = torch.randn(8192, 1024, device="cuda")
    for _ in range(100):
        for layer in layers:
            x = torch.relu(layer(x))
    x.sum().backward()


def big() -> None:
    # a matrix product first, as any model makes: cuBLAS's handle allocates
    # its own workspace from the driver, outside PyTorch's cache
    m = torch.ones(64, 64, device="cuda")
    (m @ m).sum().item()
    a = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
    b = torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")
    print("live", a.numel() + b.numel())


def _train(model: torch.nn.Module, rows: int, features: int) -> None:
    """Three optimizer steps of ``model`` on random batches (marked steps)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(rows, features, device="cuda")).sum().backward()
        opt.step()
        opt.zero_grad()


def weights() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024, device="cuda"), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 8, device="cuda"))
    _train(model, 16, 1024)
    torch.empty(400 * MIB, dtype=torch.uint8, device="cuda")


def evaluate() -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
    import minitrainer

    model = torch.nn.Linear(256, 4096, device="cuda")
    batches = (torch.randn(512, 256, device="cuda") for _ in range(100))
    preds = minitrainer.evaluate(model, batches)   # EVALUATE_LINE
    print("predictions", preds.shape)


def late() -> None:
    w = torch.nn.Parameter(torch.ones(256, 256, device="cuda"))
    opt = torch.optim.SGD([w], lr=0.1)
    kept = []
    for step in range(300):
        loss = (w @ w).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step < 5:
            kept.append(torch.empty(20 * MIB, dtype=torch.uint8, device="cuda"))
    torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")


def _retry(inside: bool) -> None:
    d = 1024
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU())
                                  for _ in range(4)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step(batch: int) -> float:
        x = torch.randn(batch, d, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for batch in (512, 8192):     # a small batch, then one too big
        failed = False
        try:
            train_step(batch)
        except torch.OutOfMemoryError:
            batch //= 4
            if inside:
                train_step(batch)   # the retry, with the first attempt still held
            failed = True
        if failed and not inside:
            train_step(batch)
    print("batch", batch)


def probe_kept() -> None:
    kept = []

    def probe(rows: int) -> None:
        x = torch.randn(rows, 1024, device="cuda")
        kept.append(x)             # kept on purpose
        torch.empty(rows * 8, 1024, device="cuda")   # runs out

    try:
        probe(16384)               # 64 MiB kept, then 512 MiB asked
    except torch.OutOfMemoryError:
        pass
    _train(torch.nn.Linear(256, 256).cuda(), 64, 256)
    torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")


def _library(empty: bool) -> None:
    blocks = [torch.empty(40 * MIB, dtype=torch.uint8, device="cuda") for _ in range(6)]
    del blocks                  # freed into PyTorch's cache, which keeps them
    if empty:
        torch.cuda.empty_cache()
    a = torch.randn(64, 64, device="cuda")
    print("sum", float((a @ a).sum()))   # the first GEMM: cuBLAS makes its handle


def library() -> None:
    _library(empty=False)


def library_emptied() -> None:
    _library(empty=True)


def _graph(delete: bool, late: bool = False, ask_in_capture: bool = False) -> None:
    x = torch.randn(4096, 2048, device="cuda")             # 32 MiB
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):                           # warm up, as PyTorch's docs do
        (x * 2).sin() + x
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = (x * 2).sin() + x                               # GRAPH_LINE
        if ask_in_capture:                                  # served from the graph's pool
            torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")
    graph.replay()
    print("replayed", float(y[0, 0]) == float((x[0, 0] * 2).sin() + x[0, 0]))
    for _ in range(200 if late else 0):
        graph.replay()
        (y[:64] * 2).sum()                                  # a small step between replays
    if delete:
        del graph
    torch.empty(176 * MIB, dtype=torch.uint8, device="cuda")


def mem_pool() -> None:
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        kept = torch.empty(32 * MIB, dtype=torch.uint8, device="cuda")
        torch.empty(240 * MIB, dtype=torch.uint8, device="cuda")
    print("pooled", kept.shape)


def _compiled_graphs(reset: bool) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 1024)).cuda()
    step = torch.compile(model, backend="cudagraphs")
    x = torch.randn(2048, 1024, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            out = step(x)                                   # COMPILED_LINE
    print("out", tuple(out.shape))
    if reset:
        torch._dynamo.reset()
    torch.empty(160 * MIB, dtype=torch.uint8, device="cuda")


def compiled_graphs() -> None:
    _compiled_graphs(reset=False)


def compiled_graphs_reset() -> None:
    _compiled_graphs(reset=True)


def graph() -> None:
    _graph(delete=False)


def graph_late() -> None:
    _graph(delete=False, late=True)


def graph_deleted() -> None:
    _graph(delete=True)


def graph_capture() -> None:
    _graph(delete=False, ask_in_capture=True)


def retry() -> None:
    _retry(inside=True)


def retry_after() -> None:
    _retry(inside=False)


if __name__ == "__main__":
    pickle_path = sys.argv[3] if sys.argv[2:3] == ["--torch-snapshot"] else None
    if os.environ.get("VT_TEST_SLOW_SNAPSHOT_HOOK"):
        import time

        import vramtrace
        pause = float(os.environ["VT_TEST_SLOW_SNAPSHOT_HOOK"])
        vramtrace.add_mark_hook(lambda kind, arg: time.sleep(pause) if kind == "snapshot" else None)
    if pickle_path:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    try:
        {"frag": frag, "leak": leak, "cycle": cycle, "big": big,
         "first_step": first_step, "late": late, "weights": weights,
         "evaluate": evaluate, "retry": retry, "retry_after": retry_after,
         "library": library, "library_emptied": library_emptied,
         "probe_kept": probe_kept, "graph": graph,
         "graph_deleted": graph_deleted, "graph_late": graph_late,
         "graph_capture": graph_capture, "mem_pool": mem_pool,
         "compiled_graphs": compiled_graphs,
         "compiled_graphs_reset": compiled_graphs_reset}[sys.argv[1]]()
    except torch.OutOfMemoryError:
        if pickle_path:
            torch.cuda.memory._dump_snapshot(pickle_path)
        if sys.argv[1] == "cycle":
            gc.collect()   # too late: what it frees could have served the request
        raise
    print("done")
