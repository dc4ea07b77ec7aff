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
their results to PATH as JSON.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import os
import sys
import time
import traceback
import warnings
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


# --------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------

class _Trackers:
    """track() for the programs, remembering the trackers made: how they
    saw ops and how many (reported apart from what the program observes)."""

    def __init__(self) -> None:
        import vramtrace.torch as vtt
        from vramtrace import _trackobs
        self._track = vtt.track
        self.made: List[Any] = []
        if _trackobs.wanted() and os.environ.get("VRAMTRACE_TRACKFAST") != "0":
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
        gc.collect()
        result["left"] = torch.cuda.memory_allocated() - start
        result["peak"] = torch.cuda.max_memory_allocated()
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
