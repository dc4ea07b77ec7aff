"""PyTorch helpers: the pluggable allocator, and tensor lifetime tracking.

``use_allocator()`` makes PyTorch allocate CUDA memory through libvramtrace
(``torch.cuda.memory.CUDAPluggableAllocator``, PyTorch >= 2.0), so that every
allocation is traced and can be snapshotted.

``track()`` records, for the reference-graph checker, what the allocator
alone cannot see::

    import vramtrace, vramtrace.torch as vtt
    with vtt.track():
        for step in range(n):
            vtt.mark(f"step {step}")
            loss = model(batch).sum(); loss.backward()
        vramtrace.snapshot("train.vtsnap")
    # then: vramtrace check train.vtsnap

- every tensor an op makes or reads, with its storage and the view it came
  from, named after the op ("aten.mm out[0]") unless :func:`name` names it;
- every use (each op's inputs and outputs) with the Python stack of the op;
- each tensor's death, and the storage's release when its last tensor dies,
  with the Python stack where that happened (CPU storages are declared as
  external storages; CUDA tensors bind to the allocations the allocator made);
- at each :func:`mark` and snapshot: what still holds the storages that were
  not used since the previous mark (``gc.get_referrers``: list indexes, dict
  keys, attributes, closure cells, frame locals, autograd saved tensors), and
  which tensors only a garbage collection of a reference cycle freed.

Over 1,000 lines because ``Tracker`` (about 800 of them) is one state
machine driven by the dispatch mode: what an op made, used and freed, and
the walks at marks, share its per-process state. The parts that stand
alone already live apart: ``_referrers.py`` (the holder walk),
``_holders.py``, ``_storage_life.py``, ``_stacks.py``.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import gc
import linecache
import os
import re
import sys
import threading
import time
import types
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import vramtrace as _vt
from ._lib import VramtraceError, get_library
from ._referrers import Edge, NodeKey, WalkResult, walk_referrers
from ._holders import HolderBook
from ._stacks import StackInterner, package_files
from ._storage_life import StorageLife, storage_of
from . import _gc_hold, _trackobs

try:
    import torch as _torch
    from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode
except ImportError as _exc:  # pragma: no cover - only without torch
    raise ImportError(f"vramtrace.torch needs PyTorch: {_exc}") from _exc

__all__ = ["use_allocator", "track", "Tracker", "name", "mark", "CYCLE_HOLDER"]

#: Name of the holder that points at tensors freed only by a gc collection.
CYCLE_HOLDER = "reference cycle collected by gc"


# Frames never shown in use stacks nor scanned for locals: ours and the
# dispatch machinery between the user's call and __torch_dispatch__.
_TORCH_DIR = os.path.dirname(os.path.abspath(_torch.__file__))
_SKIP_FILES = package_files() | frozenset(
    os.path.join(_TORCH_DIR, p) for p in (
        "_ops.py", os.path.join("utils", "_python_dispatch.py"), "overrides.py",
        os.path.join("utils", "_pytree.py"),
        # torch.set_default_device / `with torch.device(...)`: a function
        # mode (DeviceContext) that calls every factory on the user's behalf.
        os.path.join("utils", "_device.py"),
        # torch 2.x wraps dispatch-mode entry points in torch._dynamo's
        # disable wrappers (eval_frame.DisableContext, _compile._disable_dynamo).
        os.path.join("_dynamo", "eval_frame.py"), "_compile.py"))


# --------------------------------------------------------------------------
# The allocator
# --------------------------------------------------------------------------

def use_allocator(path: Optional[str] = None) -> None:
    """Make PyTorch allocate CUDA memory through libvramtrace.

    Must be called before the first CUDA allocation of the process (PyTorch
    cannot change allocators once one has allocated). ``path`` defaults to
    the library :mod:`vramtrace` loads. Raises :class:`VramtraceError` when
    this PyTorch has no CUDA or no pluggable allocator (PyTorch < 2.0), or
    when it is too late. Afterwards an allocation vramtrace cannot serve (the
    device is full even after releasing the cache) raises ``RuntimeError``
    ("CUDA out of memory (vramtrace): ...") in the allocating call.
    """
    cuda = getattr(_torch, "cuda", None)
    memory = getattr(cuda, "memory", None)
    pluggable = getattr(memory, "CUDAPluggableAllocator", None)
    change = getattr(memory, "change_current_allocator", None)
    if pluggable is None or change is None:
        raise VramtraceError(
            f"use_allocator(): PyTorch {_torch.__version__} has no "
            "torch.cuda.memory.CUDAPluggableAllocator (it needs PyTorch >= 2.0 "
            "built with CUDA); run the program under `vramtrace run -- python ...` "
            "with PYTORCH_NO_CUDA_MEMORY_CACHING=1 instead")
    if not getattr(_torch.version, "cuda", None) or not _torch.cuda.is_available():
        raise VramtraceError(
            f"use_allocator(): this PyTorch ({_torch.__version__}) has no usable "
            "CUDA (torch.version.cuda is None or no device): nothing to allocate")
    lib_path = path or _vt.library_path()
    alloc_fn, free_fn = "vt_malloc", "vt_free"
    if path is None:
        # libvramtrace_torch.so (next to the library) throws on out of memory,
        # so PyTorch raises RuntimeError instead of handing out a tensor at
        # address 0, which is what it does with vt_malloc's NULL.
        entry = os.path.join(os.path.dirname(lib_path), "libvramtrace_torch.so")
        if os.path.exists(entry):
            lib_path, alloc_fn, free_fn = entry, "vt_torch_malloc", "vt_torch_free"
        else:
            warnings.warn(f"use_allocator(): {entry} is missing (built without a C++ "
                          "compiler?): an allocation vramtrace cannot serve will give a "
                          "tensor at address 0 instead of raising")
    try:
        alloc = pluggable(lib_path, alloc_fn, free_fn)
        change(alloc)
    except RuntimeError as exc:
        raise VramtraceError(
            "use_allocator() must be called before the first CUDA allocation "
            f"(PyTorch said: {exc})") from exc


# --------------------------------------------------------------------------
# Storage access across PyTorch versions
# --------------------------------------------------------------------------

def _storage_info(t: Any) -> Optional[Tuple[int, int, int]]:
    """(data_ptr, nbytes, identity) of ``t``'s storage, or None if it has none."""
    got = _storage_and_info(t)
    return got[0] if got is not None else None


_Tensor = _torch.Tensor
_Parameter = _torch.nn.Parameter
# Tensor.untyped_storage on torch 2.x, else the version-tolerant lookup.
_untyped_storage = getattr(_Tensor, "untyped_storage", None) or storage_of


# The address of a tensor's storage, read without materializing a
# copy-on-write storage (Tensor.data_ptr() and UntypedStorage.data_ptr() do:
# the program would get a copy it never made); torch >= 2.1.
_storage_address = getattr(_torch._C, "_data_address", None)


def _tensor_address(t: Any) -> int:
    """``t.data_ptr()``, without materializing a copy-on-write storage."""
    if _storage_address is None:
        return int(t.data_ptr())
    return int(_storage_address(t)) + int(t.storage_offset()) * int(t.element_size())


def _storage_and_info(t: Any) -> Optional[Tuple[Tuple[int, int, int], Any]]:
    """((data_ptr, nbytes, identity), storage) of ``t``, or None."""
    try:
        st = _untyped_storage(t)
        nbytes = st.nbytes()
        ptr = _storage_address(t) if _storage_address is not None else st.data_ptr()
        ident = getattr(st, "_cdata", 0) or ptr
    except Exception:  # sparse, meta, functional wrappers...
        return None
    if nbytes <= 0 or ptr == 0:
        return None
    return (ptr, nbytes, ident), st


def _device_of(t: Any) -> int:
    if t.is_cuda:
        return int(t.get_device())
    return -1


_MAX_SOURCE = 60   # characters of a source line kept in a tensor's name


def _source_line(filename: str, line: int) -> str:
    """Line ``line`` of ``filename`` as the user wrote it, whitespace runs made
    one space, cut at _MAX_SOURCE characters; "" when it cannot be read."""
    try:
        src = " ".join(linecache.getline(filename, line).split())
    except Exception:
        return ""
    return src[:_MAX_SOURCE - 3] + "..." if len(src) > _MAX_SOURCE else src


def _site_name(filename: str, line: int, what: str) -> str:
    """``what`` (an op's output) named by the source line that made it, as
    the user wrote it: ``h = model(x) (train.py:40, aten.relu out[0])``."""
    src = _source_line(filename, line)
    where = f"{os.path.basename(filename)}:{line}"
    return f"{src} ({where}, {what})" if src else f"{what} at {where}"


_NESTED = (list, tuple, dict)

# "h = f(x) (train.py:40, aten.relu out[0])" -> "h = f(x) (train.py:40)": a line.
_OP_PART = re.compile(r"(:\d+), [^()]*\)$")
# A snapshot's walk also starts from the storages in use of a line that made
# at least _GROWING_LINE of them (the oldest _GROWING_WALKED of each, at most
# about _GROWING_WALKED_ALL in all): see Tracker._growing_starts.
_GROWING_LINE = 3
_GROWING_WALKED = 4
_GROWING_WALKED_ALL = 128


def _tensors_in(obj: Any, out: List[Any]) -> None:
    """Append the tensors of a nested list/tuple/dict to ``out``."""
    if isinstance(obj, _Tensor):
        out.append(obj)
    elif type(obj) is tuple or type(obj) is list or isinstance(obj, (list, tuple)):
        for x in obj:   # an op's args: mostly tensors and scalars, flat
            if isinstance(x, _Tensor):
                out.append(x)
            elif isinstance(x, _NESTED):
                _tensors_in(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _tensors_in(x, out)


# --------------------------------------------------------------------------
# Hooks of autograd nodes
# --------------------------------------------------------------------------

class _HookProbe(Exception):
    """Raised inside PyTorch's hook registration to abort it (see below)."""

    def __init__(self, hooks: Any) -> None:
        super().__init__()
        self.hooks = hooks


def _probe_hook(*_args: Any) -> None:   # never runs: its registration is aborted
    return None


def _node_hook_dicts(node: Any) -> List[Tuple[str, Any]]:
    """("pre_hooks" | "hooks", dict) of autograd ``node``, read without changing it.

    A node keeps the hooks given to ``register_prehook``/``register_hook`` in
    a dict held from C++ only (gc cannot see the edge; Python has no getter).
    Registering a hook looks up that dict and hands it to
    ``_HookMixin._register_hook(dict, hook)`` before changing the node: for
    our probe hook that call raises with the dict, so the node stays as it
    was (no dict is made where there was none)."""
    mixin = _hook_mixin
    if mixin is None:
        return []
    original = mixin.__dict__.get("_register_hook")
    if not isinstance(original, staticmethod):
        return []
    real = original.__func__

    def probing(backward_hooks: Any, hook: Any) -> Any:
        if hook is _probe_hook:
            raise _HookProbe(backward_hooks)
        return real(backward_hooks, hook)   # another thread's own registration

    out: List[Tuple[str, Any]] = []
    mixin._register_hook = staticmethod(probing)
    try:
        for kind in ("pre_hooks", "hooks"):
            register = getattr(node, "register_prehook" if kind == "pre_hooks"
                               else "register_hook", None)
            if register is None:
                continue
            try:
                register(_probe_hook)
            except _HookProbe as got:
                if got.hooks is not None:
                    out.append((kind, got.hooks))
            except Exception:
                continue
    finally:
        mixin._register_hook = original
    return out


try:
    from torch.autograd.function import _HookMixin as _hook_mixin
except ImportError:  # pragma: no cover - other torch layouts
    _hook_mixin = None


# --------------------------------------------------------------------------
# The tracker
# --------------------------------------------------------------------------

class _TensorRec:
    __slots__ = ("tid", "skey", "ref", "name", "base", "pend")

    def __init__(self, skey: int, name: str, base: int,
                 pend: Optional[Tuple[int, int, int]]) -> None:
        self.tid = 0            # recorder tensor id, 0 until recorded
        self.skey = skey        # key of its _StorageRec
        self.ref: Optional["weakref.ref[Any]"] = None  # its callback records the death
        self.name = name
        self.base = base        # root base tensor id if a view, else 0
        self.pend = pend        # (data_ptr, nbytes, stack) until recorded


# In-place ops that can give a tensor other memory.
_STORAGE_CHANGING_OPS = frozenset(("set_", "resize_", "resize_as_", "_resize_output_",
                                   "resize_as_sparse_"))


def _changes_storage(func: Any) -> bool:
    packet = getattr(func, "overloadpacket", None)
    name = getattr(packet, "__name__", "") or str(packet)
    return name.split(".")[-1] in _STORAGE_CHANGING_OPS


def _view_arg(func: Any) -> int:
    """Index of the argument an op's outputs are views of, -1 if none.

    Inside __torch_dispatch__ an output's ``_base`` is not set yet (autograd
    sets it on the way out), so views are recognized from the schema's alias
    annotations: ``t(Tensor(a) self) -> Tensor(a)``."""
    try:
        schema = func._schema
        rets = [r.alias_info for r in schema.returns]
        if not any(a is not None and not a.is_write for a in rets):
            return -1
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and not arg.alias_info.is_write:
                return i
    except Exception:
        pass
    return -1


class _StorageRec:
    __slots__ = ("ptr", "nbytes", "device", "external", "tids", "last_epoch", "skey", "weak",
                 "declared", "seen_epoch", "rest", "twins")

    def __init__(self, ptr: int, nbytes: int, device: int, external: bool, epoch: int,
                 skey: int, weak: int) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device      # -1: host
        self.external = external  # declared with vt_storage_external
        self.tids: Set[_TensorRec] = set()   # its tensors, recorded or not yet
        self.last_epoch = epoch   # marks seen before its last use
        self.skey = skey          # identity of the StorageImpl
        self.weak = weak          # StorageLife handle, 0 when unavailable
        self.declared = False     # an external storage is open at ptr in the trace
        self.seen_epoch = epoch   # last_epoch as the previous mark saw it
        self.rest = 0             # most marks it stayed unused before a use
        # The storages on its very memory, itself included (a copy-on-write
        # clone and its source; one buffer wrapped twice), shared by all of
        # them; one of them is declared. None: it has the memory to itself.
        self.twins: Optional[Set["_StorageRec"]] = None


class _Mode(_TorchDispatchMode):
    """The dispatch mode; all the work is in the tracker."""

    def __init__(self, tracker: "Tracker") -> None:
        super().__init__()
        self._tracker = tracker
        fast = tracker._fast
        if fast is not None:
            # PyTorch looks __torch_dispatch__ up on the mode object: the C
            # one, bound to the mode like a method, replaces the one below.
            self.__torch_dispatch__ = types.MethodType(fast.dispatch, self)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles with the mode off and runs what it compiled
        with the mode on: a mode saying False here makes Dynamo skip every
        frame ("non-infra torch dispatch mode present") and run the program
        eagerly instead (its backend never called; fullgraph=True raises)."""
        return True

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):  # noqa: D105
        tracker = self._tracker
        if _get_ident() != tracker._owner:
            # An autograd engine thread (backward on a device): it runs no
            # Python code of the program, so what the op allocates is shown
            # under the forward op it computes the gradient of.
            return tracker._engine_dispatch(func, types_, args, kwargs)
        # The owner thread's path, inlined (a Python call per op is ~3 % of a
        # small op's whole tracked cost).
        out = func(*args, **kwargs) if kwargs else func(*args)
        tracker._on_op(func, args, kwargs, out, True)
        return out


_ENGINE_RELEASE_S = 0.1   # the longest __exit__ waits for engine threads to drop the mode


def _let_engine_threads_go(mode: Any, refs: int) -> None:
    """Wait (the GIL released) until no autograd engine thread holds
    ``mode`` any more; ``refs``: its reference count when nothing but the
    caller held it.

    A backward on a device copies the thread's state, the mode included, into
    its graph task, which the engine thread may drop only after the program
    has its gradients back. Dropping the mode takes the GIL: were the
    interpreter finalizing by then (a program that ends right after its
    block), the engine thread would be stopped inside C++ and the process
    abort ("terminate called without an active exception")."""
    deadline = _perf_counter() + _ENGINE_RELEASE_S
    while sys.getrefcount(mode) - 1 > refs and _perf_counter() < deadline:
        time.sleep(0.0005)


def _dispatch(tracker: "Tracker", func: Any, args: Any, kwargs: Any, forward: bool) -> Any:
    out = func(*args, **(kwargs or {}))
    token = _gc_hold.hold()   # the recording is the tracker's work, not the op
    try:
        tracker._on_op(func, args, kwargs, out, forward)
    finally:
        _gc_hold.release(token)
    return out


_get_ident = threading.get_ident
_perf_counter = time.perf_counter
_cpu_clock = time.process_time   # the walk's budget: the process's CPU time
_current_node = getattr(_torch._C, "_current_autograd_node", lambda: None)
_next_sequence_nr = getattr(getattr(_torch._C, "_autograd", None), "_get_sequence_nr",
                            lambda: 0)
_MAX_NODE_STACKS = 1 << 16     # remembered forward ops before starting over
_FIRST_PASS_S = 0.02           # a heap pass's cost assumed until one is measured
# gc.get_referrers compares every reference in the heap with each object it
# looks for: each start of a walk adds about this fraction of a heap pass.
_STARTS_PER_PASS = 30
_MAX_PARTIAL_STARTS = 32       # starts of a partial walk; the rest wait for the next
_FORWARD_FRAMES = 16           # innermost forward frames replayed in backward
_FORWARD_LABEL = "forward of {}"   # their function names, as a backward op's stack shows them
_trampolines: Dict[Tuple[str, str, int, bool], Any] = {}


def _trampoline(name: str, filename: str, line: int, innermost: bool) -> Any:
    """A function whose frame reads as ``forward of NAME`` at FILE:LINE.

    The recorder reads Python frames from the interpreter's own state (code
    object and line): calling the op through these functions puts the
    forward op's stack, marked "forward of", where the engine thread has
    none. Compiled once per frame; the body is on the forward's line."""
    key = (name, filename, line, innermost)
    fn = _trampolines.get(key)
    if fn is None:
        params, body = ("fn, a", "fn(*a)") if innermost else ("nxt, fn, a", "nxt(fn, a)")
        src = "\n" * (max(line, 1) - 1) + f"def _t({params}): return {body}\n"
        code = next(c for c in compile(src, filename, "exec").co_consts
                    if isinstance(c, types.CodeType))
        label = _FORWARD_LABEL.format(name)
        code = code.replace(co_name=label)
        if hasattr(code, "co_qualname"):
            code = code.replace(co_qualname=label)
        fn = types.FunctionType(code, {})
        _trampolines[key] = fn
    return fn


def _forward_runner(frames: List[Tuple[str, str, int]]) -> Any:
    """Call ``fn(*a)`` under ``frames`` (innermost first): run(fn, a)."""
    frames = frames[:_FORWARD_FRAMES]
    run = _trampoline(*frames[0], True)
    for name, filename, line in frames[1:]:
        run = functools.partial(_trampoline(name, filename, line, False), run)
    return run


def _load_trackfast(libdir: str) -> Any:
    """The _trackfast extension module, or None: installed next to this
    package, or built next to the library (in ``libdir``: a build tree).
    VRAMTRACE_TRACKFAST=0 keeps the tracker in Python."""
    if os.environ.get("VRAMTRACE_TRACKFAST", "1") == "0":
        return None
    try:
        from . import _trackfast as mod   # type: ignore[attr-defined]
    except ImportError:
        mod = None
    if mod is None:
        import importlib.machinery
        import importlib.util
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(libdir, "_trackfast" + suffix)
            if not os.path.exists(path):
                continue
            try:
                spec = importlib.util.spec_from_file_location(f"{__package__}._trackfast", path)
                if spec is None or spec.loader is None:
                    continue
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                break
            except ImportError:
                mod = None
        if mod is None:
            return None
    try:
        from torch._C._dynamo.eval_frame import set_eval_frame
    except ImportError:
        set_eval_frame = None
    mod.setup(_Tensor, _Parameter, _next_sequence_nr, set_eval_frame, _TensorRec,
              _StorageRec, _pending_names, _take_pending_name,
              getattr(_torch._C, "_storage_id", None), _storage_address)
    _gc_hold.use(mod)
    return mod


_trackfast: Any = False   # not loaded yet


def _trackfast_for(lib: Any) -> Any:
    """The _trackfast module next to ``lib`` (loaded once), or None."""
    global _trackfast
    path = getattr(lib, "path", None)
    if not path:
        return None
    if _trackfast is False:
        _trackfast = _load_trackfast(os.path.dirname(str(path)))
    return _trackfast


def _make_fast_path(tracker: "Tracker", raw: Any, stacks: bool) -> Any:
    """A _trackfast.Dispatcher for ``tracker``, or None (Python path)."""
    if not raw or _trackfast_for(tracker._lib) is None:
        return None
    fns = [raw(n) for n in ("vt_tensor_use_stack", "vt_tensor_new_stack", "vt_tensor_drop",
                            "vt_storage_external_stack", "vt_storage_external_free_stack")]
    if any(fn is None for fn in fns):
        return None
    return _trackfast.Dispatcher(tracker, tracker._stacks.intern_frame,
                                 *(ctypes.cast(fn, ctypes.c_void_p).value for fn in fns),
                                 bool(stacks))


_active: List["Tracker"] = []
# The tracker recording in each thread (PyTorch's dispatch modes are per
# thread): a track() nested inside it defers to it.
_tls = threading.local()
# Names given to tensors no tracker has seen yet: id(tensor) -> (weakref, name).
# (Not a WeakKeyDictionary: it would compare tensors with ==.)
_pending_names: Dict[int, Tuple["weakref.ref[Any]", str]] = {}


def _take_pending_name(t: Any) -> Optional[str]:
    got = _pending_names.get(id(t))
    if got is None or got[0]() is not t:
        return None
    del _pending_names[id(t)]
    return got[1]


class _GradGraphWalk:
    """A bounded walk over autograd graphs (``grad_fn`` and its
    ``next_functions``), shared by the searches for edges that live in C++.

    Every node reached is kept in ``nodes`` with the edge that reached it in
    ``edges``; each node is handed to the caller once, across all the roots
    walked, and the whole walk stops after ``budget`` steps."""

    def __init__(self, budget: int = 2048) -> None:
        self.nodes: Dict[NodeKey, Any] = {}
        self.edges: List[Edge] = []
        self.seen: Set[int] = set()
        self.budget = budget

    def new_nodes(self, fn: Any, root: NodeKey) -> Iterator[Tuple[Any, NodeKey]]:
        """Walks from ``root``'s grad_fn ``fn``: yields each node not seen
        before, then follows its next_functions."""
        stack: List[Tuple[Any, NodeKey, str]] = [(fn, root, "grad_fn")]
        del fn
        while stack and self.budget > 0:
            node, parent, label = stack.pop()
            self.budget -= 1
            nkey: NodeKey = ("g", id(node))
            self.nodes[nkey] = node
            self.edges.append(Edge(parent, nkey, label))
            if id(node) in self.seen:
                continue
            self.seen.add(id(node))
            yield node, nkey
            for i, (nxt, _) in enumerate(getattr(node, "next_functions", ()) or ()):
                if nxt is not None:
                    stack.append((nxt, nkey, f"next_functions[{i}]"))
            del node


def _chains_to(useful: Set[NodeKey], edges: List[Edge], nodes: Dict[NodeKey, Any]
               ) -> Tuple[List[Edge], Dict[NodeKey, Any]]:
    """The edges and nodes on chains that end in ``useful``."""
    changed = True
    while changed:
        changed = False
        for e in edges:
            if e.dst in useful and e.src not in useful:
                useful.add(e.src)
                changed = True
    kept = [e for e in edges if e.dst in useful and e.src in useful]
    return kept, {k: v for k, v in nodes.items() if k in useful}


class Tracker:
    """Records tensors, uses, deaths and holders for ``vramtrace check``.

    Use through :func:`track`. Tensor deaths keep being recorded after the
    ``with`` block ends (a tensor that outlives the block still dies later);
    uses and holder walks stop.

    Ops are seen in the thread that entered the block, and in the autograd
    engine threads that run its backward passes (PyTorch hands the dispatch
    mode to them; other threads of the program are not seen); tracked
    tensors' deaths are recorded in any thread. A backward op on an engine
    thread (a CUDA device's backward) runs under the Python frames of the
    forward op it differentiates, found from its autograd node's sequence
    number, as functions named ``forward of FN`` at the forward's lines: the
    recorder's Python frames then show, for what it allocates, where the
    program made the forward op. A ``track()`` entered while another one records in the same
    thread (nested, or the same tracker re-entered) records nothing of its
    own: ``with`` gives the running tracker, which already sees every op,
    instead of declaring each tensor and storage a second time.

    An op's outputs are recorded (TENSOR_NEW, with the op's stack) only when
    the tracker next records anything - the next op, a mark or snapshot, a
    death, :meth:`tensor_id` - so that ``name(op(...), "label")`` right after
    the op names the tensor from its creation on, with no extra event. A name
    given later is a rename (vt_tensor_name, format 1.1: reports show the
    latest name). The creation event is the output's use; its time is that
    of the next recording, which changes no step (marks record first).
    """

    @_gc_hold.held
    def __init__(self, lib: Any = None, *, walk: bool = True, collect_cycles: bool = False,
                 max_depth: int = 8, max_breadth: int = 8, max_nodes: int = 4096,
                 stacks: bool = True, walk_fraction: Optional[float] = 0.25,
                 snapshot_walk_s: float = 5.0) -> None:
        self._lib = lib if lib is not None else get_library()
        self.walk = walk
        # Where the tracker's own troubles are said: a RuntimeWarning (once
        # per kind) for a program that called track(); `vramtrace run
        # --track` sets its note(), so that an unmodified program's warnings
        # filters (-W error, pytest's) never see vramtrace's.
        self.say: Optional[Callable[[str], None]] = None
        # The walk's schedule: it may spend walk_fraction of the program's
        # own CPU time between marks (credit carried over, capped), more at
        # a snapshot; it runs from the tensors gone stale that no walk has
        # seen or whose references changed, else from all stale ones at
        # exponentially spaced marks (to retract released holders).
        self.walk_fraction = None if walk_fraction is None else float(walk_fraction)
        self.snapshot_walk_s = float(snapshot_walk_s)
        self.walks = 0               # walks made
        self.walk_cutoffs = 0        # walks the time budget stopped early
        self.walks_postponed = 0     # marks where a due walk had no budget
        self.walk_seconds = 0.0      # CPU seconds spent at marks (sweeps and walks)
        self._credit = 0.0
        # CPU seconds per heap pass, last measured; before the first walk,
        # what one costs in a process with torch loaded (10-40 ms for its
        # 150,000-300,000 objects), so that the first walk waits for that
        # much credit instead of overdrawing it by a whole pass.
        self._pass_cost = _FIRST_PASS_S
        self._last_mark_end: Optional[Tuple[float, float]] = None   # (CPU, wall) clocks
        self._walked: Set[int] = set()   # tensor ids a walk started from
        # Tensor id -> its reference count when a walk that was not cut off
        # started from it: while the count stays the same, the holders that
        # walk found are still the ones (nothing took or dropped a reference).
        self._settled: Dict[int, int] = {}
        self.walks_skipped = 0       # due walks skipped: every stale tensor unchanged
        # Stale storages left out of a mark's walk because they rest as long
        # as they did before being used again (batches reused every k steps).
        self.resting_skipped = 0
        self.partial_walks = 0       # walks from only the new or changed stale tensors
        self._py_busy = 0.0          # seconds the Python path spent recording ops and deaths
        self._busy_at_mark = 0.0     # _busy at the end of the last mark
        self._marks_since_walk = 0
        self._backoff = 1
        self.collect_cycles = collect_cycles
        self.max_depth = max_depth
        self.max_breadth = max_breadth
        self.max_nodes = max_nodes
        self.epoch = 0                                # marks seen
        # id(parameter) -> (weakref, its name in a model): _param_name
        self._param_names: Dict[int, Tuple[Any, str]] = {}
        self._param_labels: Set[str] = set()   # the model names parameters were given
        self._by_obj: Dict[int, _TensorRec] = {}      # id(tensor) -> rec
        self._by_tid: Dict[int, _TensorRec] = {}      # recorded ones
        self._pending: List[_TensorRec] = []          # outputs not recorded yet
        self._storages: Dict[int, _StorageRec] = {}
        self._life = StorageLife(_torch)
        self._starts: List[int] = []                  # sorted ptrs of declared storages
        self._at_ptr: Dict[int, _StorageRec] = {}     # declared external storages by ptr
        # Storages whose last tracked tensor died: the StorageImpl is released
        # only after the death callback returns, so it is checked at the next
        # recording point. (storage, stack of the death)
        self._maybe_gone: List[Tuple[_StorageRec, Optional[int]]] = []
        # id(op) -> (index of the argument its outputs view, -1: none; whether
        # it may give a tensor other memory: set_, resize_; the op itself)
        self._op_meta: Dict[int, Tuple[int, bool, Any]] = {}
        # (id(op), output index, stack) -> name; ops in _op_meta keep their ids
        self._names: Dict[Tuple[int, int, int], str] = {}
        self._stacks = StackInterner(self._lib, _SKIP_FILES)
        self._stacks.enabled = stacks
        self._book = HolderBook(self._lib)
        # Hot paths: the bare ctypes calls when the library has them.
        raw = getattr(self._lib, "raw", None)
        self._use = (raw and raw("vt_tensor_use_stack")) or self._lib.tensor_use
        self._drop_use = (raw and raw("vt_tensor_drop")) or self._lib.tensor_drop
        self._new_raw = raw and raw("vt_tensor_new_stack")
        self._ext_raw = raw and raw("vt_storage_external_stack")
        self._ext_free_raw = raw and raw("vt_storage_external_free_stack")
        self._encoded: Dict[str, bytes] = {}   # tensor names, as the library takes them
        self._mode: Optional[_Mode] = None
        self._mode_refs = 0          # the mode's reference count before it was entered
        self._observer: Any = None   # the op observer (_trackobs) instead of the mode
        #: How ops were seen once the block was entered: "observer" (PyTorch's
        #: RecordFunction hook, vramtrace/_trackobs.py) or "dispatch mode".
        self.ops_seen_by = ""
        self._recording = False
        self._in_gc = False          # inside a collection we did not start
        self._manual_gc = False      # inside our own cycle collection
        self._gc_dead: List[Tuple[int, int]] = []   # (tid, id(obj)) died in a collection
        self._gc_holder = 0          # holder of the running automatic collection
        self.errors = 0
        #: Tracked tensors that a garbage collection freed (held by a reference cycle).
        self.gc_freed = 0
        self._py_ops = 0             # ops the Python path recorded
        self._deferred: List["Tracker"] = []   # running trackers a nested enter gave
        self._owner = 0              # the thread that entered: it runs the forward ops
        # Autograd node sequence number -> stack id of the forward op that
        # made the node, and stack id -> the frames that replay it.
        self._node_stacks: Dict[int, int] = {}
        self._forward_frames: Dict[int, Any] = {}
        self._lent_frames: Dict[int, int] = {}   # the same, interned (op observer)
        # The per-op path in C (_trackfast, scripts/trackfast/), when it is built for this
        # Python and the library is the real one (its C entry points). It
        # holds the containers above: _by_obj, _by_tid, _pending, _storages,
        # _maybe_gone, _op_meta, _node_stacks, _names, _encoded, _starts and
        # _at_ptr are changed in place, never rebound.
        self._fast = _make_fast_path(self, raw, stacks)

    # -- context -----------------------------------------------------------
    @_gc_hold.held
    def __enter__(self) -> "Tracker":
        running = getattr(_tls, "tracker", None)
        if running is not None:
            self._deferred.append(running)
            return running
        _tls.tracker = self
        self._owner = _get_ident()
        self._observer = _trackobs.load() if self._fast is not None and \
            _trackobs.wanted() else None
        if self._observer is not None:
            # Storages read in C++ from now on, also after __exit__ and
            # when another thread's tracker has the observer: Python's
            # data_ptr() would materialize a copy-on-write storage.
            self._life.read_with(self._observer.storage_now)
            self._fast.storage_reader = self._observer.storage_now_address
            lend = self._lib.raw("vt_thread_python_stack")   # _fast: the real library
            try:
                self._observer.install(self._fast.observed, self._fast.observed_engine,
                                       _trackobs.op_for, self._engine_frames,
                                       ctypes.cast(lend, ctypes.c_void_p).value if lend else 0,
                                       getattr(_trackfast, "GC_HOLD_API", 0))
                # what it reads of each tensor in C++, used with its weak maker
                self._fast.weak_maker = self._observer.make_weak_address
            except RuntimeError:   # another thread's tracker has it: this one, the mode
                self._observer = None
        if self._observer is None:
            self._mode = _Mode(self)
            self._mode_refs = sys.getrefcount(self._mode)
            self._mode.__enter__()
        self.ops_seen_by = "observer" if self._observer is not None else "dispatch mode"
        self._recording = True
        _active.append(self)
        _vt.add_mark_hook(self._on_mark)
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        return self

    @_gc_hold.held
    def __exit__(self, *exc: Any) -> None:
        if self._deferred:   # a nested enter: the running tracker goes on
            self._deferred.pop()
            return
        if getattr(_tls, "tracker", None) is self:
            _tls.tracker = None
        self._flush()
        self._settle()
        self._recording = False
        _vt.remove_mark_hook(self._on_mark)
        if self in _active:
            _active.remove(self)
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(*exc)
            _let_engine_threads_go(mode, self._mode_refs)
            del mode
        if self._observer is not None:
            self._observer.uninstall()
            self._fast.weak_maker = 0
            self._observer = None

    @_gc_hold.held
    def close(self) -> None:
        """Stop recording deaths too (tensors still alive are left as they are)."""
        try:
            gc.callbacks.remove(self._on_gc)
        except ValueError:
            pass
        self._flush()
        for rec in list(self._by_tid.values()):
            rec.ref = None
        self._by_tid.clear()
        self._by_obj.clear()

    @property
    def ops(self) -> int:
        """Ops recorded so far (by either path)."""
        fast = self._fast
        return self._py_ops + (fast.ops if fast is not None else 0)

    def _busy(self) -> float:
        """Seconds spent recording ops and deaths (the walk schedule's input)."""
        fast = self._fast
        return self._py_busy + (fast.busy if fast is not None else 0.0)

    def storages_now(self) -> Dict[int, Tuple[int, int, int]]:
        """The tracked storages alive now, by identity: (address, bytes,
        device; -1 for host memory). Outputs held back are recorded and the
        storages whose last tensor died are settled first."""
        self._flush()
        self._settle()
        return {k: (s.ptr, s.nbytes, s.device) for k, s in self._storages.items()}

    # -- bookkeeping of tensors --------------------------------------------
    def tensor_id(self, t: Any) -> int:
        """The recorder id of tensor ``t`` (0 when not tracked)."""
        rec = self._by_obj.get(id(t))
        return self._record(rec) if rec is not None else 0

    def _record(self, rec: _TensorRec) -> int:
        """Record ``rec``'s TENSOR_NEW if not done yet; its tensor id."""
        pend = rec.pend
        if pend is not None:
            rec.pend = None
            new = self._new_raw
            if new is not None:
                name = self._encoded.get(rec.name)
                if name is None:
                    if len(self._encoded) >= 1 << 16:
                        self._encoded.clear()
                    name = self._encoded[rec.name] = rec.name.encode("utf-8", "replace")
                tid = new(pend[0], pend[1], rec.base, name, pend[2])
            else:
                tid = int(self._lib.tensor_new(pend[0], pend[1], rec.base, rec.name, pend[2]))
            rec.tid = tid
            self._by_tid[tid] = rec
        return rec.tid

    def _flush(self) -> None:
        """Record the outputs held back, in creation order."""
        if self._pending:
            pending = self._pending[:]
            self._pending.clear()
            for rec in pending:
                self._record(rec)

    def _track(self, t: Any, name: str, stack: int, view_of: Any = None,
               defer: bool = False) -> Optional[_TensorRec]:
        rec = self._by_obj.get(id(t))
        if rec is not None:
            return rec
        got = _storage_and_info(t)
        if got is None:
            return None
        (ptr, nbytes, skey), st = got
        srec = self._storages.get(skey)
        if srec is not None and (srec.ptr != ptr or srec.nbytes != nbytes):
            self._check_storage(srec, stack)    # its memory moved (resize_)
            srec = self._storages.get(skey)
        if srec is None:
            device = _device_of(t)
            external = device < 0
            srec = _StorageRec(ptr, nbytes, device, external, self.epoch, skey,
                               self._life.weak(st))
            self._storages[skey] = srec
            if external:
                self._declare(srec, stack)
        del st, got
        base_id = 0
        base = getattr(t, "_base", None)
        if base is None:
            base = view_of
        if base is not None:
            brec = self._track(base, "view base", stack)
            if brec is not None:
                base_id = brec.base or self._record(brec)
        user = _take_pending_name(t) if _pending_names else None
        if user is not None:
            name = user
        try:
            tptr = _tensor_address(t)
        except Exception:
            tptr = ptr
        rec = _TensorRec(skey, name, base_id, (tptr, t.nbytes, stack))
        key = id(t)
        rec.ref = weakref.ref(t, functools.partial(self._on_death, rec, key))
        self._by_obj[key] = rec
        srec.tids.add(rec)
        if defer:
            self._pending.append(rec)
        else:
            self._record(rec)
        return rec

    def _out_name(self, func: Any, i: int, stack: int, forward: bool = True) -> str:
        """An output's name: the user's line that made it, then the op
        ("y = torch.tanh(x @ w) (train.py:12, aten.mm out[0])"); the op
        alone when there is no stack. An op of the backward pass is named
        by the line of its forward op ("..., backward: aten.mm out[0])")."""
        key = (id(func), i if forward else -1 - i, stack)   # a backward name apart
        got = self._names.get(key)
        if got is None:
            packet = getattr(func, "overloadpacket", func)
            got = f"{packet} out[{i}]" if forward else f"backward: {packet} out[{i}]"
            site = self._stacks.sites.get(stack) if stack else None
            if site is not None:
                got = _site_name(site[0], site[1], got)
            if len(self._names) >= 1 << 16:
                self._names.clear()
            self._names[key] = got
        return got

    def _input_name(self, is_param: bool, stack: int) -> str:
        """The name of a tensor first seen as an op's input (made before
        track() began, or where no op showed it being made: a parameter's
        memory made by ``nn.Linear``): what it is and the user's line that
        first used it, ``parameter, first used by "self.head = nn.Linear(d, h)"
        (model.py:41)``; a parameter is renamed after its model's name for it
        at the next mark that finds one (_grads_follow_parameters)."""
        kind = "parameter" if is_param else "input"
        key = (kind, stack)
        got = self._names.get(key)
        if got is None:
            got = kind
            site = self._stacks.sites.get(stack) if stack else None
            if site is not None:
                src = _source_line(site[0], site[1])
                where = f"{os.path.basename(site[0])}:{site[1]}"
                got = f'{kind}, first used by "{src}" ({where})' if src else f"{kind} at {where}"
            if len(self._names) >= 1 << 16:
                self._names.clear()
            self._names[key] = got
        return got

    def _on_op(self, func: Any, args: Any, kwargs: Any, out: Any, forward: bool = True,
               stack: Optional[int] = None) -> None:
        # The hot path: every op of the program runs it. Locals instead of
        # attribute lookups, flat arguments without a call per element.
        if not self._recording:
            return
        began = _perf_counter()
        try:
            if self._maybe_gone:
                self._settle()
            if self._pending:
                self._flush()
            self._py_ops += 1
            ins: List[Any] = []
            for x in args:   # an op's args: mostly tensors and scalars, flat
                if isinstance(x, _Tensor):
                    ins.append(x)
                elif isinstance(x, _NESTED):
                    _tensors_in(x, ins)
            if kwargs:
                _tensors_in(kwargs, ins)
            if isinstance(out, _Tensor):
                outs: Any = (out,)
            else:
                outs = []
                _tensors_in(out, outs)
            if not ins and not outs:
                return
            if stack is None:   # given: from _trackfast, or an engine thread's op
                stack = self._stacks.capture(3)
            if forward and stack:
                # The autograd node an op made (below autograd, so before
                # this op ran) holds the sequence number just taken.
                seq = _next_sequence_nr() - 1
                nodes = self._node_stacks
                if seq >= 0 and seq not in nodes:
                    if len(nodes) >= _MAX_NODE_STACKS:
                        nodes.clear()
                    nodes[seq] = stack
            epoch = self.epoch
            use = self._use
            by_obj = self._by_obj
            storages = self._storages
            # A tensor seen for the first time is recorded with this op's
            # stack: its TENSOR_NEW is its use here.
            for t in ins:
                rec = by_obj.get(id(t))
                if rec is not None:
                    use(rec.tid, stack)
                else:
                    rec = self._track(t, self._input_name(isinstance(t, _Parameter), stack), stack)
                    if rec is None:
                        continue
                storages[rec.skey].last_epoch = epoch
            if not outs:
                return
            meta = self._op_meta.get(id(func)) or self._meta_of(func)
            vi, reshaping, _ = meta
            view_of = args[vi] if 0 <= vi < len(args) and isinstance(args[vi], _Tensor) else None
            for i, t in enumerate(outs):
                rec = by_obj.get(id(t))
                if rec is not None and reshaping:   # set_, resize_: maybe other memory
                    info = _storage_info(t)
                    srec = storages.get(rec.skey)
                    if info is None or srec is None or info[2] != rec.skey or \
                            (info[0], info[1]) != (srec.ptr, srec.nbytes):
                        if srec is not None and info is not None and info[2] == rec.skey:
                            self._check_storage(srec, stack)
                        else:
                            self._migrate(rec, stack)
                            if srec is not None and not srec.tids:
                                # it may have gone with the move: its release
                                # is this op's, not the next mark's
                                self._check_storage(srec, stack)
                        rec = by_obj.get(id(t))
                        if rec is None:
                            continue
                if rec is not None:   # in-place and out= ops return an input
                    use(rec.tid or self._record(rec), stack)
                else:
                    rec = self._track(t, self._out_name(func, i, stack, forward), stack, view_of,
                                      defer=True)
                    if rec is None:
                        continue
                storages[rec.skey].last_epoch = epoch
        except Exception as exc:  # never break the user's program
            self._recording_failed(func, exc)
        finally:
            self._py_busy += _perf_counter() - began

    def _meta_of(self, func: Any) -> Tuple[int, bool, Any]:
        """(index of the argument ``func``'s outputs view, -1: none; whether
        it may give a tensor other memory: set_, resize_; the op), cached.
        Keyed by id: an OpOverload hashes in Python (a call per lookup);
        the entry keeps the op alive, so its id stays its own."""
        meta = self._op_meta[id(func)] = (_view_arg(func), _changes_storage(func), func)
        return meta

    def _engine_dispatch(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        """An op on an autograd engine thread (the C dispatch hands these
        over): run under the frames of the forward op it differentiates."""
        token = _gc_hold.hold()
        try:
            run = self._forward_of()
        finally:
            _gc_hold.release(token)
        if run is not None:
            return run(_dispatch, (self, func, args, kwargs, False))
        return _dispatch(self, func, args, kwargs, False)

    def _warn(self, message: str, stacklevel: int) -> None:
        """Say ``message`` where :attr:`say` wants it (a RuntimeWarning
        pointing ``stacklevel`` frames up from the caller by default)."""
        if self.say is not None:
            self.say(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)

    def _recording_failed(self, func: Any, exc: BaseException) -> None:
        """Recording ``func`` raised ``exc`` (either path): counted, warned
        once (the op itself succeeded and is returned)."""
        self.errors += 1
        if self.errors == 1:
            self._warn(f"vramtrace.torch: recording {func} failed: {exc!r}", 2)

    def _forward_stack(self, seq: Optional[int] = None) -> int:
        """On an autograd engine thread: the stack id of the forward op that
        made the node whose backward runs now, or the node numbered ``seq``
        (0: none known)."""
        if seq is not None:
            return self._node_stacks.get(seq) or 0
        try:
            # the node's Python object lives as long as the graph: the program's
            made = _gc_hold.count()
            node = _current_node()
            _gc_hold.as_program(_gc_hold.count() - made)
            if node is None:
                return 0
            sid = self._node_stacks.get(node._sequence_nr())
            del node
        except Exception:
            return 0
        return sid or 0

    def _engine_frames(self, seq: int) -> int:
        """For the op observer, on an autograd engine thread running the
        backward of the node numbered ``seq``: the stack id of the frames to
        lend the thread while its op runs and to record the op with (what
        the mode gets by running the op through _forward_of's functions),
        0: none. (The observer reads the node's number in C++: asking
        Python for the node would give it a Python object.)"""
        sid = self._forward_stack(seq)
        if not sid:
            return 0
        lent = self._lent_frames.get(sid)
        if lent is None:
            frames = self._stacks.frames.get(sid) or []
            lent = self._stacks.intern_frames([(_FORWARD_LABEL.format(name), filename, line)
                                               for name, filename, line in
                                               frames[:_FORWARD_FRAMES]])
            if len(self._lent_frames) >= _MAX_NODE_STACKS:
                self._lent_frames.clear()
            self._lent_frames[sid] = lent
        return lent

    def _forward_of(self) -> Any:
        """What runs a backward op of this engine thread under the Python
        frames of the forward op it differentiates (None: none known)."""
        sid = self._forward_stack()
        if not sid:
            return None
        run = self._forward_frames.get(sid)
        if run is None:
            frames = self._stacks.frames.get(sid)
            run = _forward_runner(frames) if frames else None
            if len(self._forward_frames) >= _MAX_NODE_STACKS:
                self._forward_frames.clear()
            self._forward_frames[sid] = run
        return run

    def _rename(self, t: Any, label: str) -> bool:
        rec = self._by_obj.get(id(t))
        if rec is None:
            return False
        if rec.name == label:
            return True
        if rec.pend is not None:   # not recorded yet: recorded under this name
            rec.name = label
            return True
        if getattr(self._lib, "can_rename", hasattr(self._lib, "tensor_name")):
            # The library records a rename: same id, storage and uses.
            self._lib.tensor_name(rec.tid, label)
            rec.name = label
            return True
        # Fallback for a library older than vt_tensor_name (format 1.0): the
        # tensor continues as a new logical tensor under the new name (same
        # storage), the old one ends here; reports may still show the old
        # name as the storage's owner.
        stack = self._stacks.capture(1)
        new = _TensorRec(rec.skey, label, rec.base,
                         (_tensor_address(t), int(t.numel()) * int(t.element_size()), stack))
        new.ref = weakref.ref(t, functools.partial(self._on_death, new, id(t)))
        self._by_obj[id(t)] = new
        srec = self._storages.get(rec.skey)
        if srec is not None:
            srec.tids.add(new)
        self._record(new)
        rec.ref = None  # its death callback is moot
        self._drop(rec, stack)
        return True

    # -- deaths ------------------------------------------------------------
    @_gc_hold.held
    def _on_death(self, rec: _TensorRec, objid: int, _ref: Any) -> None:
        if rec.ref is None:    # renamed, or the tracker was closed
            return
        if self._by_obj.get(objid) is rec:
            del self._by_obj[objid]
        began = _perf_counter()
        try:
            if self._maybe_gone and not self._manual_gc:
                self._settle()
            tid = self._record(rec)
            if self._manual_gc:
                # Our own collection: the holders are recorded before the drops.
                self._gc_dead.append((tid, objid))
                return
            if self._in_gc:
                self.gc_freed += 1
                if not self._gc_holder:
                    self._gc_holder = self._book.collection(CYCLE_HOLDER)
                self._lib.ref(self._gc_holder, tid, "cycle")
            self._drop(rec, None)
        except Exception:
            self.errors += 1
        finally:
            self._py_busy += _perf_counter() - began

    def _drop(self, rec: _TensorRec, stack: Optional[int]) -> None:
        """Record ``rec``'s death (and its storage's, if it was the last);
        ``stack``: where, None to capture the Python stack here."""
        if self._by_tid.pop(rec.tid, None) is None:
            return
        rec.ref = None
        self._drop_use(rec.tid)
        self._book.forget_target(rec.tid)
        srec = self._storages.get(rec.skey)
        if srec is not None:
            srec.tids.discard(rec)
            if not srec.tids:
                self._orphaned(srec, stack)

    def _orphaned(self, srec: _StorageRec, stack: Optional[int]) -> None:
        """The last tracked tensor on ``srec`` died (``stack``: where, None
        to capture it here)."""
        if stack is None and srec.external:
            stack = self._stacks.capture(2)
        if srec.weak and not self._life.sole_owner(srec.skey):
            # The storage may outlive its last Python tensor (a view
            # of it, held as a storage): ask it, once it can tell.
            self._maybe_gone.append((srec, stack))
        else:
            self._end_storage(srec, stack)

    # -- storages ------------------------------------------------------------
    def _declare(self, srec: _StorageRec, stack: Optional[int]) -> None:
        """Open ``srec``'s memory as an external storage in the trace; first
        end any storage known at an overlapping address (its memory was freed
        behind our back and the allocator reused it: a new storage) -- unless
        that storage is alive on this very memory: then ``srec`` is its twin
        (a copy-on-write clone of it, or the same buffer wrapped again), and
        the memory, open already, stays open while either lives."""
        starts = self._starts
        end = srec.ptr + srec.nbytes
        i = bisect.bisect_left(starts, end) - 1
        while i >= 0:
            old = self._at_ptr.get(starts[i])
            if old is None or old.ptr + old.nbytes <= srec.ptr:
                break
            self._check_storage(old, stack, force=True)
            if srec.weak and self._at_ptr.get(old.ptr) is old and old.declared \
                    and old.ptr == srec.ptr and old.nbytes == srec.nbytes:
                twins = old.twins
                if twins is None:
                    twins = old.twins = {old}
                twins.add(srec)
                srec.twins = twins
                return
            i = min(i, len(starts)) - 1
        device = -1 if srec.device < 0 else srec.device
        if self._ext_raw is not None and stack is not None:
            rc = self._ext_raw(srec.ptr, srec.nbytes, device, stack)
            if rc != 0:
                raise VramtraceError(f"vt_storage_external_stack({srec.ptr:#x}, {srec.nbytes}) "
                                     f"failed: {self._lib.strerror(rc)} ({rc})")
        else:
            self._lib.storage_external(srec.ptr, srec.nbytes, device, stack)
        srec.declared = True
        bisect.insort(starts, srec.ptr)
        self._at_ptr[srec.ptr] = srec

    def _undeclare(self, srec: _StorageRec, stack: Optional[int]) -> None:
        if srec.twins is not None:   # the memory lives on with its twins
            self._leave_twins(srec)
            return
        if not srec.declared:
            return
        srec.declared = False
        if self._at_ptr.get(srec.ptr) is srec:
            del self._at_ptr[srec.ptr]
            i = bisect.bisect_left(self._starts, srec.ptr)
            if i < len(self._starts) and self._starts[i] == srec.ptr:
                del self._starts[i]
        if stack is None:
            stack = self._stacks.capture(1)
        if self._ext_free_raw is not None:
            rc = self._ext_free_raw(srec.ptr, stack)
            if rc != 0:
                raise VramtraceError(f"vt_storage_external_free_stack({srec.ptr:#x}) "
                                     f"failed: {self._lib.strerror(rc)} ({rc})")
        else:
            self._lib.storage_external_free(srec.ptr, stack)

    def _leave_twins(self, srec: _StorageRec) -> None:
        """``srec`` is gone or has memory of its own now (a copy-on-write
        storage written to): it leaves its twins (at least one: a storage
        left alone has no twins), which keep the memory; the declaration
        passes to one of them if it held it. Nothing to record."""
        twins = srec.twins
        srec.twins = None
        twins.discard(srec)
        heir = next(iter(twins))
        if len(twins) == 1:
            heir.twins = None
        if srec.declared:
            heir.declared = True
            srec.declared = False
            if self._at_ptr.get(srec.ptr) is srec:
                self._at_ptr[srec.ptr] = heir

    def _end_storage(self, srec: _StorageRec, stack: Optional[int]) -> None:
        """The storage is gone: record its release, forget it; tensors that
        were on it and still live have moved to another storage."""
        if self._storages.get(srec.skey) is srec:
            del self._storages[srec.skey]
        if srec.external:
            self._undeclare(srec, stack)
        self._life.release(srec.weak)
        srec.weak = 0
        for rec in list(srec.tids):
            self._migrate(rec, stack)

    def _check_storage(self, srec: _StorageRec, stack: Optional[int], force: bool = False
                       ) -> None:
        """Compare what we know of ``srec`` with the storage itself."""
        if not srec.weak:
            if force:   # no way to ask it: an address reused means it is gone
                self._end_storage(srec, stack)
            return
        now = self._life.now(srec.weak)
        if now is None:
            self._end_storage(srec, stack)
            return
        ptr, nbytes = now
        if (ptr, nbytes) == (srec.ptr, srec.nbytes):
            return
        # Same storage, new memory (resize_, resize_(0)): the old memory's
        # life ends here; new memory is a new storage in the trace, and the
        # tensors on it are bound anew.
        if srec.external:
            self._undeclare(srec, stack)
        srec.ptr, srec.nbytes = ptr, nbytes
        if nbytes > 0 and ptr and srec.external:
            self._declare(srec, stack)
        for rec in list(srec.tids):
            self._migrate(rec, stack)

    def _migrate(self, rec: _TensorRec, stack: Optional[int]) -> None:
        """``rec``'s tensor now lives on other memory: end it and record the
        tensor anew (same name) on the memory it has now."""
        t = rec.ref() if rec.ref is not None else None
        srec = self._storages.get(rec.skey)
        if srec is not None:
            srec.tids.discard(rec)
        if rec.tid:
            self._by_tid.pop(rec.tid, None)
            self._drop_use(rec.tid)
            self._book.forget_target(rec.tid)
        elif rec in self._pending:
            self._pending.remove(rec)
        rec.ref = None
        if t is None:
            return
        if self._by_obj.get(id(t)) is rec:
            del self._by_obj[id(t)]
        if stack is None:
            stack = self._stacks.capture(1)
        self._track(t, rec.name, stack)
        del t

    def _settle(self) -> None:
        """Storages whose last tensor died: released now, or kept while
        something else (autograd, a storage object) still holds them."""
        while self._maybe_gone:
            gone = self._maybe_gone[:]
            self._maybe_gone.clear()
            for srec, stack in gone:
                if srec.tids or self._storages.get(srec.skey) is not srec:
                    continue
                if self._life.expired(srec.weak):
                    self._end_storage(srec, stack)

    def _sweep(self) -> None:
        """At a mark: every storage and tensor against what they are now.
        The C path names the few that may have changed (a mark of a big
        model would otherwise pay Python calls for each of its storages)."""
        self._settle()
        fast = self._fast
        for srec in fast.storages_to_check() if fast is not None else list(self._storages.values()):
            if srec.weak:
                self._check_storage(srec, None)
        for rec in fast.tensors_to_check() if fast is not None else list(self._by_tid.values()):
            t = rec.ref() if rec.ref is not None else None
            if t is None:
                continue
            info = _storage_info(t)
            if info is not None and info[2] != rec.skey:
                self._migrate(rec, None)
            del t

    @_gc_hold.held
    def _on_gc(self, phase: str, info: Dict[str, Any]) -> None:
        if self._manual_gc:
            return
        if phase == "stop" and self._maybe_gone:
            try:
                self._settle()
            except Exception:
                self.errors += 1
        self._in_gc = phase == "start"
        self._gc_holder = 0   # one holder per collection, made on first need

    # -- marks and snapshots -------------------------------------------------
    @_gc_hold.held
    def _on_mark(self, kind: str, arg: str) -> None:
        # Runs just before the mark is recorded. The checker flags a storage
        # last used in step j that is still alive at mark j+2 (one complete
        # unused step), and looks up its holders at that mark: so walk every
        # storage not used since the previous mark, and do it now.
        # Nothing done here is the program's: ops that the walk or the
        # storage checks cause (reading saved tensors makes detach views)
        # are not recorded.
        recording, self._recording = self._recording, False
        began, began_wall = _cpu_clock(), _perf_counter()
        if self._last_mark_end is not None and self.walk_fraction is not None:
            # The program's own time: the CPU time since the last mark less
            # the share of it that recording ops and deaths took (timed on
            # the wall clock per op, which a syscall per op would not be).
            # CPU time, because other processes stretch the wall clock of
            # a busy machine and the walk would be paid by the program.
            cpu, wall = began - self._last_mark_end[0], began_wall - self._last_mark_end[1]
            busy = self._busy() - self._busy_at_mark
            own = cpu * max(0.0, 1.0 - busy / wall) if wall > 0 else 0.0
            self._credit = min(self._credit + self.walk_fraction * own,
                               max(1.0, self.snapshot_walk_s))
        try:
            self._flush()
            threshold = self.epoch
            if kind == "mark":
                self._grads_follow_parameters(threshold)
                self.epoch += 1
            try:
                self._sweep()
                if self.collect_cycles:
                    self._collect_cycles()
                if self.walk:
                    self._walk_stale(threshold, kind == "snapshot")
            except VramtraceError:
                raise
            except Exception as exc:
                self.errors += 1
                self._warn(f"vramtrace.torch: holder walk at {kind} {arg!r} failed: {exc!r}", 3)
        finally:
            self._recording = recording
            end = _cpu_clock()
            self.walk_seconds += end - began
            self._last_mark_end = (end, _perf_counter())
            self._busy_at_mark = self._busy()
            # All of a mark's work is paid from the credit, not just the walk.
            self._credit -= end - began

    def _tensor_key(self, obj: Any) -> Optional[NodeKey]:
        if isinstance(obj, _torch.Tensor):
            rec = self._by_obj.get(id(obj))
            if rec is not None:
                return ("t", self._record(rec))
        return None

    def _ignore_ids(self) -> Set[int]:
        return {id(self), id(self._by_obj), id(self._by_tid), id(self._storages),
                id(self._gc_dead), id(self._pending), id(self.__dict__)}

    def _walk(self, starts: Dict[NodeKey, Any], extra: Set[int],
              deadline: Optional[float] = None) -> WalkResult:
        return walk_referrers(starts, self._tensor_key, skip_files=_SKIP_FILES,
                              ignore_ids=self._ignore_ids() | extra,
                              max_depth=self.max_depth, max_breadth=self.max_breadth,
                              max_nodes=self.max_nodes, deadline=deadline, clock=_cpu_clock)

    def _collect_cycles(self) -> None:
        """Collect garbage cycles, recording what held each tracked tensor.

        The first collection saves the garbage (DEBUG_SAVEALL) so its
        structure can be walked; the second frees it. Tensor weakrefs are
        cleared by the first already, so their deaths queue in _gc_dead."""
        old_debug = gc.get_debug()
        n0 = len(gc.garbage)
        self._manual_gc = True
        try:
            gc.set_debug(old_debug | gc.DEBUG_SAVEALL)
            gc.collect()
        finally:
            gc.set_debug(old_debug)
            self._manual_gc = False
        garbage = gc.garbage[n0:]
        del gc.garbage[n0:]
        dead, self._gc_dead = self._gc_dead, []
        self.gc_freed += len(dead)
        try:
            if dead:
                dead_ids = {objid: tid for tid, objid in dead}
                starts: Dict[NodeKey, Any] = {}
                for obj in garbage:
                    tid = dead_ids.get(id(obj))
                    if tid is not None:
                        starts[("t", tid)] = obj
                res = self._walk(starts, {id(garbage), id(dead_ids)})
                starts.clear()
                cyc = self._book.collection(CYCLE_HOLDER)
                extra = [Edge(("c", 0), top, "cycle") for top in set(res.tops.values())]
                # A reference to every tensor it freed (the checker's mark
                # of a collection's victims), also those the walk reached.
                extra += [Edge(("c", 0), ("t", tid), "cycle") for tid, _ in dead]
                self._book.emit(res, None, tuple(extra), {("c", 0): cyc})
                del res
        finally:
            garbage.clear()
            del garbage
            gc.collect()   # now without SAVEALL: frees the cycles for real
            for tid, _ in dead:
                rec = self._by_tid.get(tid)
                if rec is not None:
                    self._drop(rec, None)

    def _grads_follow_parameters(self, epoch: int) -> None:
        """A parameter's ``.grad`` is the parameter's state, not a tensor of
        its own step: it lives until the next backward replaces it or
        ``zero_grad`` frees it. Each step that used a parameter (``epoch``)
        uses its grad too, so a grad left after the last backward (an
        evaluation after training, a skipped optimizer step) is not a
        finding while its parameter is in use; a grad whose parameter is
        no longer used lingers like any tensor."""
        by_obj, storages, use = self._by_obj, self._storages, self._use
        named = self._param_labels
        params = [rec for srec in storages.values() if srec.last_epoch >= epoch
                  for rec in srec.tids
                  if rec.name.startswith("parameter") or rec.name in named]
        looked_up = False
        for rec in params:
            t = rec.ref() if rec.ref is not None else None
            if not isinstance(t, _Parameter):
                del t
                continue
            if rec.name.startswith("parameter"):
                # named as its model knows it, once a model holds it
                name = self._param_name(t, not looked_up)
                looked_up = True
                if name and self._rename(t, name):
                    named.add(name)
            g = getattr(t, "_grad", None)
            grec = by_obj.get(id(g)) if g is not None else None
            if grec is not None and grec.tid:
                use(grec.tid, 0)
                gst = storages.get(grec.skey)
                if gst is not None:
                    gst.last_epoch = epoch
                if not grec.name.endswith(".grad"):
                    name = self._param_name(t, not looked_up)
                    looked_up = True
                    if name:
                        self._name_grad(g, grec, name + ".grad")
            del t, g

    def _name_grad(self, g: Any, grec: "_TensorRec", name: str) -> None:
        """Name a gradient after its parameter: the ``.grad`` tensor and the
        backward output it views (the storage's owner, made by the autograd
        engine and named by the forward's line), also when that one is gone."""
        self._rename(g, name)
        if not getattr(self._lib, "can_rename", hasattr(self._lib, "tensor_name")):
            return
        base = self._by_tid.get(grec.base) if grec.base else None
        if grec.base and (base is None or "backward: " in base.name):
            self._lib.tensor_name(grec.base, name)
            if base is not None:
                base.name = name

    def _param_name(self, param: Any, look: bool) -> str:
        """A parameter's name in the model that holds it, as the program knows
        it: ``GPT.transformer.h.0.attn.c_attn.weight`` (the model's class,
        then ``named_parameters()``'s name). The models alive are looked up
        (``look``: at most once per mark, one pass over the collector's
        objects) when a parameter is not known yet; "" when none holds it
        (remembered too: a parameter no model holds is not looked up again)."""
        known = self._param_names.get(id(param))
        if known is not None and known[0]() is param:
            return known[1]
        if not look:
            return ""
        self._param_names[id(param)] = (weakref.ref(param), "")
        module_type = _torch.nn.Module
        try:
            # type(), not isinstance(): isinstance reads __class__, which some
            # objects compute (torch.distributed's deprecated reduce_op warns)
            modules = [o for o in gc.get_objects() if issubclass(type(o), module_type)]
            inner = {id(c) for m in modules for c in m._modules.values() if c is not None}
            for root in modules:
                if id(root) in inner:
                    continue
                prefix = type(root).__name__
                for n, p in root.named_parameters():
                    self._param_names[id(p)] = (weakref.ref(p), f"{prefix}.{n}")
            del modules
        except Exception:  # noqa: BLE001 - a name is a nicety
            return ""
        known = self._param_names.get(id(param))
        return known[1] if known is not None and known[0]() is param else ""

    def _stale_starts(self, threshold: int, final: bool
                      ) -> Tuple[Dict[NodeKey, Any], Dict[int, int]]:
        """The tensors a mark walks from, with their reference counts.

        A storage not used since the previous mark is stale; one that went
        unused this long before and was used again (a batch reused every k
        steps) rests and is left out until it stays unused longer than it
        ever did: the checker flags none of those, and a walk would only
        find the same holder again. At a snapshot every stale one counts."""
        starts: Dict[NodeKey, Any] = {}
        counts: Dict[int, int] = {}
        getrefcount = sys.getrefcount
        for srec in self._storages.values():
            last = srec.last_epoch
            if last != srec.seen_epoch:
                rest = last - srec.seen_epoch - 1
                if rest > srec.rest:
                    srec.rest = rest
                srec.seen_epoch = last
            if last >= threshold:
                continue
            if not final and threshold - last <= srec.rest:
                self.resting_skipped += 1
                continue
            for rec in srec.tids:
                t = rec.ref() if rec.ref is not None and rec.tid else None
                if t is not None:
                    starts[("t", rec.tid)] = t
                    counts[rec.tid] = getrefcount(t)   # same spot every mark
                del t
        if final:
            self._growing_starts(threshold, starts, counts)
        return starts, counts

    def _growing_starts(self, threshold: int, starts: Dict[NodeKey, Any],
                        counts: Dict[int, int]) -> None:
        """At a snapshot, also the tensors of storages in use that one line
        made many of: what grows step over step is used every step (hooks
        that pile up on a parameter, each using its own closure's tensor),
        so no mark walks it, and the checker's growth rule would name the
        line but not what keeps its storages. The oldest few of each such
        line (those a growth finding shows), a bounded number in all."""
        by_line: Dict[str, List[_StorageRec]] = {}
        for srec in self._storages.values():     # oldest first: dicts keep order
            if srec.last_epoch < threshold:
                continue                          # stale: walked already
            for rec in srec.tids:
                if rec.base == 0 and rec.tid:
                    by_line.setdefault(_OP_PART.sub(r"\1)", rec.name), []).append(srec)
                    break
        added = 0
        getrefcount = sys.getrefcount
        for line, srecs in by_line.items():
            if len(srecs) < _GROWING_LINE or "(" not in line:
                continue
            for srec in srecs[:_GROWING_WALKED]:
                for rec in srec.tids:
                    t = rec.ref() if rec.ref is not None and rec.tid else None
                    if t is not None and ("t", rec.tid) not in starts:
                        starts[("t", rec.tid)] = t
                        counts[rec.tid] = getrefcount(t)
                        added += 1
                    del t
            if added >= _GROWING_WALKED_ALL:
                break

    def _walk_stale(self, threshold: int, final: bool = False) -> None:
        starts, counts = self._stale_starts(threshold, final)
        if not starts:
            self._book.emit(WalkResult(), "stale")   # retracts all it asserted
            self._walked.clear()
            self._settled.clear()
            return
        # A walk costs about one heap pass per level plus a little per
        # start, so the stale tensors no walk has seen, and those whose
        # references changed since a complete walk, are walked together
        # (a partial walk: it adds what it finds and retracts only what it
        # no longer finds of its own starts); all of them, to retry what a
        # cut-off walk missed and retract released holders, only at
        # exponentially spaced marks and at a snapshot.
        self._marks_since_walk += 1
        settled = self._settled
        walked = self._walked
        fresh = [k for k in starts if k[1] not in walked]
        changed = [k for k in starts if k[1] in settled and settled[k[1]] != counts[k[1]]]
        full = final or (not fresh and not changed and self._marks_since_walk >= self._backoff
                         and not all(settled.get(t) == n for t, n in counts.items()))
        if not final and not fresh and not changed:
            if self._marks_since_walk >= self._backoff and not full:
                # A clean loop's stale tensors (batches reused every k
                # steps) are the same tensors under the same references
                # mark after mark: what the last complete walk recorded
                # still stands, and a heap pass would only find it again.
                self.walks_skipped += 1
                self._marks_since_walk = 0
            if not full:
                starts.clear()
                return
        if not full:
            part = set(fresh) | set(changed)
            if len(part) > _MAX_PARTIAL_STARTS:   # the oldest first: dicts keep order
                part = set([k for k in starts if k in part][:_MAX_PARTIAL_STARTS])
            if len(part) < len(starts):
                for k in [k for k in starts if k not in part]:
                    del starts[k]
                    del counts[k[1]]
            else:
                full = True
        began = _cpu_clock()
        if self.walk_fraction is None:      # no time budget
            allowance = float("inf")
        else:
            allowance = max(self._credit, self.snapshot_walk_s) if final else self._credit
        # A walk at a mark runs when its budget fits its first level (a heap
        # pass, longer with more starts) and one more: the first finds the
        # containers, the second what owns them. A snapshot's walk, the
        # last chance, runs its first level whatever its budget.
        need = 0.0 if final else self._pass_cost * (2 + len(starts) / _STARTS_PER_PASS)
        if allowance <= 0 or allowance < need:
            self.walks_postponed += 1
            starts.clear()
            return
        res = self._walk(starts, set(), None if allowance == float("inf") else began + allowance)
        if res.levels:
            # Per heap pass with no start; the first level had them all.
            self._pass_cost = (_cpu_clock() - began) / (
                res.levels + len(starts) / _STARTS_PER_PASS)
        self.walks += 1
        self._backoff = 1 if fresh else min(2 * self._backoff, 64)
        self._marks_since_walk = 0
        if res.cut_off:
            self.walk_cutoffs += 1
            if self.walk_cutoffs == 1:
                self._warn(
                    f"vramtrace.torch: the holder walk ran out of its time budget "
                    f"({allowance * 1e3:.0f} ms) after {res.levels} levels; holders "
                    "farther up are looked for at later marks (Tracker.walk_cutoffs "
                    "counts these)", 4)
        # Walked (cut off or not): walked again only at the backoff's marks,
        # so a walk that never fits its budget is not retried at every mark.
        # _walked and _settled hold the tensors whose references the walks
        # asserted are still asserted: a full walk retracts those of the
        # tensors it did not start from.
        if full:
            self._walked = set()
            settled = {}
        self._walked = {t for t in self._walked if t in self._by_tid}
        self._walked.update(k[1] for k in starts)
        self._settled = {t: n for t, n in settled.items() if t in self._by_tid}
        if not res.cut_off:
            self._settled.update(counts)
        else:
            for t in counts:
                self._settled.pop(t, None)
        # A view holds its base (view._base, from C++: invisible to gc).
        views = [Edge(k, ("t", self._by_tid[k[1]].base), "._base") for k in starts
                 if k[1] in self._by_tid and ("t", self._by_tid[k[1]].base) in starts]
        res.edges.extend(views)
        edges = list(res.edges)
        held = {e.dst for e in edges}
        orphans = [k for k in starts if k not in held]
        extra: Tuple[Edge, ...] = ()
        if orphans:
            grad_edges, grad_nodes = self._autograd_edges(orphans, starts)
            for k, node in grad_nodes.items():
                res.names[k] = type(node).__name__
                res.objects[k] = node
            extra = tuple(grad_edges)
            del grad_nodes
        hook_edges, hook_nodes = self._hook_edges(res, held)
        if hook_edges:
            for k, node in hook_nodes.items():
                res.names[k] = type(node).__name__
                res.objects[k] = node
            extra += tuple(hook_edges)
        del hook_nodes
        only = None if full else {k[1] for k in starts}
        starts.clear()
        self._book.emit(res, "stale", extra, only=only)
        del res
        if not full:
            self.partial_walks += 1

    def _hook_edges(self, res: WalkResult, held: Set[NodeKey]
                    ) -> Tuple[List[Edge], Dict[NodeKey, Any]]:
        """Edges from autograd nodes to the hook dicts a walk stopped at.

        A walk up from a tensor kept by a hook's closure ends at the hooks
        dict (nothing in Python holds it: its node does, from C++). Search
        the graphs of the live tracked tensors (bounded) for the node that
        owns each such dict, so that a cycle through a node's hooks (the
        tensor's grad_fn -> its pre-hook -> the closure -> the tensor) shows
        as the cycle it is."""
        want: Dict[int, NodeKey] = {}
        for k, obj in res.objects.items():
            # PyTorch keeps hooks in an OrderedDict (_HookMixin._register_hook)
            if k not in held and type(obj) is OrderedDict and k[0] == "o":
                want[id(obj)] = k
        if not want:
            return [], {}
        graph = _GradGraphWalk()
        for rec in list(self._by_tid.values()):
            t = rec.ref() if rec.ref is not None else None
            fn = t.grad_fn if t is not None else None
            del t
            if fn is None:
                continue
            for node, nkey in graph.new_nodes(fn, ("t", rec.tid)):
                for kind, hooks in _node_hook_dicts(node):
                    k = want.get(id(hooks))
                    if k is not None:
                        graph.edges.append(Edge(nkey, k, kind))
                    del hooks
                del node
            del fn
        # Keep only the chains that end at a wanted dict.
        return _chains_to(set(want.values()), graph.edges, graph.nodes)

    def _autograd_edges(self, orphans: List[NodeKey], starts: Dict[NodeKey, Any]
                        ) -> Tuple[List[Edge], Dict[NodeKey, Any]]:
        """Edges from autograd nodes that save the storages of ``orphans``.

        Saved tensors live in C++, invisible to gc: search the graphs of the
        live tracked tensors (bounded) for `_saved_*` tensors sharing storage."""
        want: Dict[int, NodeKey] = {}
        for k in orphans:
            info = _storage_info(starts[k])
            if info is not None:
                want[info[2]] = k
        if not want:
            return [], {}
        graph = _GradGraphWalk()
        edges = graph.edges
        for rec in list(self._by_tid.values()):
            t = rec.ref() if rec.ref is not None else None
            if t is None:
                continue
            root: NodeKey = ("t", rec.tid)
            # A tensor's .grad lives in C++ (invisible to gc).
            # (Reading .grad of a non-leaf makes PyTorch warn the user.)
            g = getattr(t, "_grad", None) if t.requires_grad and (
                t.is_leaf or t.retains_grad) else None
            if g is not None:
                info = _storage_info(g)
                if info is not None and info[2] in want and ("t", rec.tid) != want[info[2]]:
                    edges.append(Edge(root, want[info[2]], ".grad"))
            del g
            fn = t.grad_fn
            if fn is None:
                continue
            for node, nkey in graph.new_nodes(fn, root):
                tname = type(node).__name__
                for attr in dir(node):
                    if not attr.startswith("_saved_") or attr.endswith(("sizes", "strides")):
                        continue
                    try:
                        val = getattr(node, attr)
                    except Exception:
                        continue
                    vals = val if isinstance(val, (list, tuple)) else (val,)
                    for v in vals:
                        if isinstance(v, _torch.Tensor):
                            info = _storage_info(v)
                            if info is not None and info[2] in want:
                                edges.append(Edge(nkey, want[info[2]],
                                                  f"SavedTensor '{attr[7:]}' of {tname}"))
        # Keep only the chains that end at a wanted tensor.
        return _chains_to(set(want.values()), graph.edges, graph.nodes)


# --------------------------------------------------------------------------
# Module-level helpers
# --------------------------------------------------------------------------

def track(lib: Any = None, **options: Any) -> Tracker:
    """A context manager that records tensor lifetimes for ``vramtrace check``.

    Options: ``walk`` (record holders at marks, default True),
    ``collect_cycles`` (at each mark and snapshot, collect garbage cycles and
    record what held each tracked tensor they freed under a "reference cycle
    collected by gc" holder; default False, because freeing cycles at every
    mark changes when the program frees memory -- without it such cycles are
    reported as the cycles they are, and a collection the program runs
    itself still records the holder), ``max_depth``/``max_breadth``/``max_nodes`` (bounds
    of the referrer walk), ``stacks`` (record Python stacks of uses),
    ``walk_fraction`` (the walk may take this fraction of the program's own
    CPU time between marks -- the time not spent recording ops and deaths --,
    default 0.25: all of a mark's work is paid from it, so the marks add at
    most a quarter of the program's own time; None: no time budget),
    ``snapshot_walk_s`` (the budget of the walk at a snapshot, default 5 s).
    A walk cut short by its budget is counted in ``Tracker.walk_cutoffs`` and
    warned about once; what it did not reach is looked for at later marks.

    A mark walks from the tensors whose storage went unused since the
    previous mark, except a storage resting no longer than it did before
    being used again (a batch reused every k steps: ``resting_skipped``);
    only the ones no walk has seen or whose references changed are walked
    (``partial_walks``), all of them at exponentially spaced marks and at a
    snapshot; a mark whose stale tensors are all unchanged since a complete
    walk skips it (``walks_skipped``).
    """
    # Loading the library and _trackfast and building the tracker are
    # vramtrace's own work: no collection starts meanwhile, and the
    # collector's count is put back as it was (gc_schedule.c; the hold
    # itself comes with _trackfast).
    before, enabled = gc.get_count()[0], gc.isenabled()
    gc.disable()
    try:
        lib = lib if lib is not None else get_library()
        if getattr(lib, "raw", None) is not None:
            _trackfast_for(lib)
        tracker = Tracker(lib, **options)
    finally:
        if enabled:
            gc.enable()
        _gc_hold.hold()   # its token (the count now) is not wanted
        _gc_hold.release(before)
    return tracker


def name(t: Any, label: str) -> Any:
    """Name tensor ``t`` for reports ("fc2 out"); returns ``t``.

    Right after ``t`` is made the name replaces the op-derived one; later, it
    renames the recorded tensor (reports show its latest name). A tensor no
    tracker has seen yet takes the name when first seen."""
    if not isinstance(label, str):
        raise TypeError(f"name(): label must be str, not {type(label).__name__}")
    for tr in _active:
        if tr._rename(t, label):
            return t
    try:
        key = id(t)
        ref = weakref.ref(t, lambda _r, k=key: _pending_names.pop(k, None))
    except TypeError as exc:
        raise TypeError(f"name(): {type(t).__name__} cannot be named: {exc}") from exc
    _pending_names[key] = (ref, label)
    return t


def mark(label: str) -> None:
    """:func:`vramtrace.mark`: a labelled point (e.g. "step 3"); every active
    tracker records there what holds the tensors gone stale."""
    _vt.mark(label)
