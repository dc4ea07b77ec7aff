"""Small programs of real model code, for the differential test
(test_track_differential.py): each runs with and without track() and must
give the same observable results either way.

A program is a function ``prog(r)``; ``r`` (a Recorder) gives it the device
(``r.dev``), the block to run under (``r.tracked()``: track() or nothing) and
where its observable results go: ``r.val(x)`` (a tensor's bytes on the CPU,
its shape and dtype and memory_allocated() on the simulated device, where
kernels compute nothing), ``r.note(x)`` (any plain value, also on the device:
only what does not depend on computed values), ``r.mem(label)``
(memory_allocated() on the device). What it prints, the warnings it gets and
the exception it ends with are recorded by the runner.

Run as a script: ``diff_corpus.py PATH [NAME ...]`` runs the programs (all
by default) on each of their devices, untracked or under track() as
VT_DIFF_TRACK says (0: untracked, vramtrace never imported), and writes
their results to PATH as JSON. VT_DIFF_TICK_S=SECONDS, by hand, ticks a
tracked program that often (diff_recorder._Trackers): a stress of the
ticks' walks, e.g. 0.001 with the_collectors_count_moves_per_step_as_untracked.

The programs are here and in diff_corpus_more.py; what they run with (the
registry, the Recorder, the trackers) is diff_recorder.py.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from diff_recorder import (PROGRAMS, Recorder, _seed, _Trackers,  # noqa: F401
                           _tracked_factory, _train, program)


# --- every common module, built inside track() ---------------------------

@program()
def linear_built_inside(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(r.dev)
        r.mem("built")
        x, y = torch.randn(5, 8, device=r.dev), torch.randn(5, 4, device=r.dev)
        _train(r, model, x, y)
    r.mem("after")


def _no_cudnn(r: Recorder) -> None:
    """The simulated device has no cuDNN: convolutions take PyTorch's own kernels."""
    torch.backends.cudnn.enabled = not r.cuda


@program()
def conv_batchnorm(r: Recorder) -> None:
    _seed(r)
    _no_cudnn(r)
    with r.tracked():
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.Conv2d(4, 2, 3, stride=2), nn.GroupNorm(1, 2),
                              nn.Flatten()).to(r.dev)
        x = torch.randn(2, 3, 8, 8, device=r.dev)
        y = torch.randn(2, 2 * 3 * 3, device=r.dev)
        _train(r, model, x, y)
        r.val(model[1].running_mean)
        r.note(int(model[1].num_batches_tracked))
        model.eval()
        with torch.no_grad():
            r.val(model(x))
    r.mem("after")


@program()
def embedding_layernorm_adam(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Embedding(20, 8, padding_idx=0), nn.LayerNorm(8),
                              nn.Linear(8, 3)).to(r.dev)
        idx = torch.randint(0, 20, (4, 5), device=r.dev)
        y = torch.randn(4, 5, 3, device=r.dev)
        _train(r, model, idx, y, opt=torch.optim.Adam(model.parameters(), lr=1e-2))
        emb = nn.EmbeddingBag(10, 4, mode="mean").to(r.dev)
        r.val(emb(torch.tensor([1, 2, 4, 5, 4, 3], device=r.dev),
                  torch.tensor([0, 3], device=r.dev)))


@program()
def multihead_attention(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        mha = nn.MultiheadAttention(8, 2, batch_first=True).to(r.dev)
        q = torch.randn(2, 5, 8, device=r.dev, requires_grad=True)
        mask = torch.triu(torch.ones(5, 5, dtype=torch.bool, device=r.dev), 1)
        out, weights = mha(q, q, q, attn_mask=mask)
        r.val([out, weights])
        out.sum().backward()
        r.val(q.grad)
        r.mem("backward")
        mha.eval()
        with torch.inference_mode():
            r.val(mha(q, q, q, need_weights=False)[0])   # the fast path
    r.mem("after")


@program()
def transformer_encoder(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1,
                                           batch_first=True)
        enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(r.dev)
        x = torch.randn(2, 6, 16, device=r.dev)
        _train(r, enc, x, torch.zeros(2, 6, 16, device=r.dev),
               opt=torch.optim.AdamW(enc.parameters(), lr=1e-3))
        enc.eval()
        pad = torch.zeros(2, 6, dtype=torch.bool, device=r.dev)
        pad[0, 4:] = True
        with torch.no_grad():
            r.val(enc(x, src_key_padding_mask=pad))
        tr = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True).to(r.dev)
        r.val(tr(torch.randn(1, 4, 8, device=r.dev), torch.randn(1, 3, 8, device=r.dev)))
    r.mem("after")


# --- models ----------------------------------------------------------------

class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        h = self.b2(self.c2(h))
        return F.relu(h + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.layers = nn.Sequential(_Block(8, 8, 1), _Block(8, 16, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


@program()
def resnet(r: Recorder) -> None:
    _seed(r)
    _no_cudnn(r)
    with r.tracked():
        model = ResNet().to(r.dev)
        x = torch.randn(4, 3, 16, 16, device=r.dev)
        y = torch.randint(0, 5, (4,), device=r.dev)
        _train(r, model, x, y, loss_fn=F.cross_entropy)
    r.mem("after")


class GPT(nn.Module):
    def __init__(self, vocab: int = 32, d: int = 16, heads: int = 2, n: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, 8, d))
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
            ln2=nn.LayerNorm(d), mlp=nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(),
                                                   nn.Linear(4 * d, d))))
            for _ in range(n))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight     # tied
        self.heads = heads

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        h = self.tok(idx) + self.pos[:, :t]
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](h)).split(h.shape[-1], dim=2)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + blk["proj"](a.transpose(1, 2).reshape(b, t, -1))
            h = h + blk["mlp"](blk["ln2"](h))
        return self.head(self.ln(h))


def _lm_loss(logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx.reshape(-1))


@program()
def gpt_tied(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = GPT().to(r.dev)
        r.note(model.head.weight is model.tok.weight)
        r.note(len(list(model.parameters())))
        idx = torch.randint(0, 32, (2, 8), device=r.dev)
        _train(r, model, idx, idx, loss_fn=_lm_loss,
               opt=torch.optim.AdamW(model.parameters(), lr=1e-2))
    r.mem("after")


@program("cuda")
def gpt2_embedding_tied(r: Recorder) -> None:
    # GPT-2 small's token embedding (50,257 x 768, tied with the head; one
    # block instead of twelve): 147.2 MiB, in a segment of 148 MiB (PyTorch
    # rounds large segments to 2 MiB), where what is left is too little to
    # split off: the block is handed out whole, and memory_allocated()
    # counts 148 MiB for it, its gradient and SGD's momentum each
    _seed(r)
    with r.tracked():
        model = GPT(vocab=50257, d=768, heads=12, n=1).to(r.dev)
        idx = torch.randint(0, 50257, (2, 8), device=r.dev)
        _train(r, model, idx, idx, steps=3, loss_fn=_lm_loss)
    r.mem("after")


# --- parametrizations ------------------------------------------------------

class _Symmetric(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w.triu() + w.triu(1).transpose(-1, -2)


@program()
def parametrize_and_norms(r: Recorder) -> None:
    from torch.nn.utils import parametrizations, parametrize
    _seed(r)
    with r.tracked():
        a = nn.Linear(6, 6).to(r.dev)
        parametrize.register_parametrization(a, "weight", _Symmetric())
        b = parametrizations.weight_norm(nn.Linear(6, 6).to(r.dev))
        # spectral norm's power iteration calls cublasSdot, which the
        # simulated cuBLAS does not have: on the CPU only
        c = parametrizations.spectral_norm(nn.Linear(6, 4)) if not r.cuda else nn.Linear(
            6, 4, device=r.dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            d = nn.utils.weight_norm(nn.Linear(4, 4).to(r.dev))   # the old hook form
        # orthogonal's QR needs cuSOLVER, which the simulated device lacks
        e = parametrizations.orthogonal(nn.Linear(4, 4)) if not r.cuda else nn.Linear(
            4, 4, device=r.dev)
        model = nn.Sequential(a, b, c, d, e)
        x = torch.randn(3, 6, device=r.dev)
        _train(r, model, x, torch.randn(3, 4, device=r.dev))
        with parametrize.cached():
            r.val(model(x))
        parametrize.remove_parametrizations(a, "weight")
        r.val(a.weight)
    r.mem("after")


# --- compile, amp, checkpointing, func ----------------------------------------

def _compiled(r: Recorder, backend: str) -> None:
    import torch._dynamo
    torch._dynamo.reset()
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).to(r.dev)
        cm = torch.compile(model, backend=backend)
        x, y = torch.randn(4, 8, device=r.dev), torch.randn(4, 2, device=r.dev)
        _train(r, cm, x, y)
        f = torch.compile(lambda a, b: (a @ b).relu().sum(), backend=backend)
        r.val(f(x, x.T))
    r.mem("after")
    torch._dynamo.reset()


@program("cpu")
def compile_eager(r: Recorder) -> None:
    _compiled(r, "eager")


@program("cpu")
def compile_aot_eager(r: Recorder) -> None:
    _compiled(r, "aot_eager")


@program("cuda")
def compile_inductor(r: Recorder) -> None:
    # inductor's own code generation: Triton kernels built, loaded and launched
    # at run time (the simulated device loads them: tests/sim/driver_module.c);
    # each path compiles cold, in a cache of its own (test_track_differential)
    _compiled(r, "inductor")


@program("cuda")
def compile_reduce_overhead_keeps_outputs(r: Recorder) -> None:
    # mode="reduce-overhead": inductor's kernels replayed as CUDA graphs
    # (cudagraph trees), their outputs in the graphs' pool. The program keeps
    # every step's output, or a row of it (a view: an op the tracker records
    # on it), which the next replay overwrites: PyTorch makes each read of a
    # kept one raise (torch._C._set_storage_access_error_msg), the tracker's
    # reads at ops, marks and walks too, which must not
    import torch._dynamo
    torch._dynamo.reset()
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).to(r.dev)
        cm = torch.compile(model, mode="reduce-overhead")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(4, 8, device=r.dev), torch.randn(4, 2, device=r.dev)
        kept = []
        for i in range(4):
            opt.zero_grad()
            out = cm(x)
            F.mse_loss(out, y).backward()
            opt.step()
            kept.append(out if i % 2 == 0 else out[:, -1])
            r.mem("step")
            r.mark("step")
        r.snapshot()
        try:
            kept[0].sum()
        except RuntimeError as exc:
            r.note(str(exc).split(".")[0])
        del kept, out
    torch._dynamo.reset()
    r.mem("after")


@program("cpu")
def autocast_bf16_gradscaler(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
        x, y = torch.randn(6, 8), torch.randn(6, 4)
        for _ in range(2):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
                r.note(str(out.dtype))
                loss = F.mse_loss(out.float(), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            r.val(loss)
            r.val(scaler.get_scale())
        r.val(list(model.parameters()))


@program("cuda")
def autocast_fp16_device(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(r.dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(6, 8, device=r.dev)
        for _ in range(2):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                out = model(x)
                r.note(str(out.dtype))
                loss = out.float().pow(2).mean()
            r.mem("forward")
            loss.backward()
            opt.step()
            r.mem("step")


class _Deep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.parts = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Dropout(0.2))
                                   for _ in range(3))

    def forward(self, x: torch.Tensor, reentrant: bool) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint
        for p in self.parts:
            x = checkpoint(p, x, use_reentrant=reentrant)
        return x


@program()
def checkpointing(r: Recorder) -> None:
    for reentrant in (True, False):
        _seed(r)
        with r.tracked():
            model = _Deep().to(r.dev)
            x = torch.randn(4, 8, device=r.dev, requires_grad=True)
            out = model(x, reentrant)
            r.mem("forward")
            out.pow(2).sum().backward()
            r.val([out, x.grad] + list(model.parameters()) + [p.grad for p in model.parameters()])
        r.mem("after")


@program("cpu")
def torch_func(r: Recorder) -> None:
    from torch.func import functional_call, grad, jacrev, vmap
    _seed(r)
    with r.tracked():
        model = nn.Linear(4, 2)
        params = {k: v.detach() for k, v in model.named_parameters()}
        x, y = torch.randn(5, 4), torch.randn(5, 2)

        def loss(p: Dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> Any:
            return F.mse_loss(functional_call(model, p, (xi,)), yi)

        per_example = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
        r.val([per_example["weight"], per_example["bias"]])
        r.val(jacrev(torch.sin)(torch.arange(3.0)))
        r.val(vmap(torch.dot)(x, x))


class _Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, k: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.k = k
        return x ** 3 * k

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * ctx.k * g, None


class _ScaleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


@program()
def custom_function(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        x = torch.randn(5, device=r.dev, requires_grad=True)
        y = _Cube.apply(x, 0.5)
        z = _ScaleInPlace.apply(y.clone())
        z.sum().backward()
        r.val([y, z, x.grad])
        r.mem("after backward")
        g = torch.autograd.grad(_Cube.apply(x, 2.0).sum(), x, create_graph=True)[0]
        g.sum().backward()
        r.val([g, x.grad])


@program()
def hooks(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).to(r.dev)
        log: List[str] = []
        model[0].register_forward_pre_hook(lambda m, a: log.append("pre"))
        model[0].register_forward_hook(lambda m, a, o: o * 2)
        model[2].register_full_backward_hook(lambda m, gi, go: log.append("full backward"))
        model[2].register_full_backward_pre_hook(lambda m, go: log.append("backward pre"))
        model[0].weight.register_post_accumulate_grad_hook(lambda p: log.append("accumulated"))
        x = torch.randn(3, 4, device=r.dev, requires_grad=True)
        x.register_hook(lambda g: g * 0.5)
        out = model(x)
        out.grad_fn.register_hook(lambda gi, go: log.append("node"))
        out.grad_fn.register_prehook(lambda go: log.append("node pre"))
        out.sum().backward()
        print("hooks ran:", ", ".join(log))
        r.val([out, x.grad, model[0].weight.grad])
        with nn.modules.module.register_module_forward_hook(lambda m, a, o: log.append(
                type(m).__name__)):
            model(x)
        r.note(log)


@program()
def grad_modes(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        model = nn.Linear(4, 3).to(r.dev)
        x = torch.randn(2, 4, device=r.dev)
        with torch.no_grad():
            a = model(x)
        r.note(a.requires_grad)
        with torch.inference_mode():
            b = model(x)
            c = b * 2
        r.note([b.is_inference(), c.requires_grad])
        r.val([a, b, c])
        try:
            model(b).sum().backward()   # an inference tensor saved for backward
        except RuntimeError as exc:
            r.note(str(exc))
        with torch.enable_grad():
            torch.set_grad_enabled(False)
            r.note(model(x).requires_grad)
            torch.set_grad_enabled(True)
        r.mem("after")


# --- tensor subclasses -------------------------------------------------------

class Logged(torch.Tensor):
    """A __torch_function__ subclass that prints the functions it sees."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        print("torch_function", getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


class TaggedParameter(nn.Parameter):
    """An nn.Parameter subclass (as FSDP's and quantization libraries make)."""

    def __new__(cls, data: torch.Tensor, tag: str = "") -> "TaggedParameter":
        p = super().__new__(cls, data, requires_grad=True)
        p.tag = tag
        return p


class Plain(torch.Tensor):
    pass


@program()
def subclasses(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        a = torch.randn(3, 3, device=r.dev).as_subclass(Logged)
        b = (a @ a).sum(0)
        r.note(type(b).__name__)
        r.val(b)
        p = TaggedParameter(torch.randn(3, device=r.dev), "w")
        r.note([type(p).__name__, p.tag, p.requires_grad])
        (p * 2).sum().backward()
        r.val(p.grad)
        s = torch.Tensor._make_subclass(Plain, torch.randn(2, device=r.dev), True)
        r.note([type(s).__name__, s.requires_grad])
        buf = nn.Buffer(torch.ones(2, device=r.dev))
        r.note(type(buf).__name__)
        m = nn.Module()
        m.w = nn.Parameter(torch.ones(2, device=r.dev))
        m.w = nn.Parameter(m.w.detach() * 3)    # replaced
        r.val(m.w)
        r.mem("after")


@program("cpu")
def sparse_complex_meta(r: Recorder) -> None:
    _seed(r)
    with r.tracked():
        i = torch.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
        v = torch.randn(4, requires_grad=True)
        s = torch.sparse_coo_tensor(i, v, (3, 3))
        d = torch.randn(3, 2, requires_grad=True)
        out = torch.sparse.mm(s, d)
        out.sum().backward()
        r.val([out, v.grad, d.grad, s.coalesce().indices()])
        csr = torch.randn(4, 4).relu().to_sparse_csr()
        r.val(csr @ torch.randn(4, 2))
        z = torch.randn(4, dtype=torch.complex64, requires_grad=True)
        w = torch.fft.fft(z * z.conj() + 1j)
        w.abs().sum().backward()
        r.val([w, z.grad])
        m = nn.Linear(1000, 1000, device="meta")
        r.val(m(torch.empty(7, 1000, device="meta")))
        m.to_empty(device="cpu")
        r.note(str(m.weight.device))
        try:
            torch.empty(2, device="meta").item()
        except Exception as exc:   # noqa: BLE001 - its type is what is compared
            r.note(f"{type(exc).__name__}: {exc}")


import diff_corpus_more  # noqa: E402,F401 - registers the rest of the corpus


# --------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------

def _settle_autograd_device_threads() -> None:
    """Let autograd's device thread finish the backward a program ran last.

    A backward that raised (a hook's KeyError) leaves its graph task, which
    holds the exception, its traceback and so the frames' tensors, to whichever
    thread lets go of it last. When the device thread is preempted after waking
    the caller (a loaded 2-core CI machine), it is the last: it frees the task
    only once it gets the GIL back, after memory_allocated() was read, and the
    untracked run reads 1,536 bytes more than on an idle machine. A backward on
    the device queues behind that work and returns only when it is done, with
    the GIL released: every path reads the same figure, whatever the timing.
    Its own blocks are freed before the reading (the peak is read before it)."""
    leaf = torch.ones(1, device="cuda", requires_grad=True)
    (leaf * 1.0).sum().backward()
    del leaf


def run_one(fn: Callable[[Recorder], None], dev: str, tracked: Callable[[], Any]) -> dict:
    """One program's observable results."""
    r = Recorder(dev, tracked)
    out, err = io.StringIO(), io.StringIO()
    exc = None
    if r.cuda:
        torch.cuda.synchronize()
    start = torch.cuda.memory_allocated() if r.cuda else 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(r)
            if not r.cuda:
                r.val(torch.get_rng_state())
        except Exception as e:   # noqa: BLE001 - what it raises is compared
            exc = f"{type(e).__name__}: {e}"
            where = traceback.format_exc()
    result = {
        "seen": r.seen, "exception": exc, "stdout": out.getvalue(), "stderr": err.getvalue(),
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    }
    if exc is not None and not exc.startswith("ValueError: the program's own"):
        result["traceback"] = where   # for the reader; not compared
    if r.cuda:
        result["peak"] = torch.cuda.max_memory_allocated()
        _settle_autograd_device_threads()
        gc.collect()
        result["left"] = torch.cuda.memory_allocated() - start
    if isinstance(tracked, _Trackers):
        result["tracked"] = tracked.report()
    elif getattr(sys.modules.get("vramtrace.torch"), "_active", None):
        # under `vramtrace run --track`: the whole program's tracker (the
        # corpus itself never imports vramtrace on this path)
        t = sys.modules["vramtrace.torch"]._active[0]
        result["tracked"] = {"seen_by": [t.ops_seen_by, t._fast is not None], "ops": t.ops,
                             "errors": t.errors}
    return result


def main(argv: List[str]) -> int:
    path, names = argv[0], argv[1:] or list(PROGRAMS)
    tracked = _tracked_factory()
    cuda = torch.cuda.is_available()
    results: Dict[str, Any] = {}
    for name in names:
        fn, devices = PROGRAMS[name]
        for dev in devices:
            if dev == "cuda" and not cuda:
                continue
            if dev == "cuda":
                torch.cuda.reset_peak_memory_stats()
            began = time.perf_counter()
            results[f"{name}[{dev}]"] = res = run_one(fn, dev, tracked)
            res["seconds"] = round(time.perf_counter() - began, 3)   # not compared
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
