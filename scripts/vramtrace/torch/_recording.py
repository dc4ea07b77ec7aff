"""Recording ops: what an op made, used and freed, seen through the dispatch
mode or handed over by the op observer, and the deaths of tracked tensors.
A backward op on an autograd engine thread runs under trampolines named
after the forward op's frames.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import types
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .. import _gc_hold
from ._cycles import CYCLE_HOLDER
from ._naming import _site_name, _source_line
from . import _records
from ._records import _StorageRec, _TensorRec
from ._registry import _pending_names, _take_pending_name
from ._torch_facts import (_Parameter, _Tensor, _changes_storage, _device_of,
    _storage_and_info, _storage_info, _tensor_address, _view_arg, _NESTED, _tensors_in,
    _current_node, _next_sequence_nr)
if TYPE_CHECKING:   # only for annotations: _tracker imports this module
    from ._tracker import Tracker

from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode


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
_MAX_NODE_STACKS = 1 << 16     # remembered forward ops before starting over
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


class _Recording:
    """The tracker's op recording (a mixin of :class:`Tracker`)."""

    # -- bookkeeping of tensors --------------------------------------------
    def tensor_id(self, t: Any) -> int:
        """The recorder id of tensor ``t`` (0 when not tracked)."""
        rec = self._by_obj.get(id(t))
        return self._record(rec) if rec is not None else 0

    def _record(self, rec: _TensorRec, trace_base: Optional[int] = None) -> int:
        """Record ``rec``'s TENSOR_NEW if not done yet; its tensor id.
        ``trace_base``: the base the trace gets instead of ``rec.base``
        (VT_TENSOR_SAVED_ONLY for a tensor standing for a saved one)."""
        pend = rec.pend
        if pend is not None:
            rec.pend = None
            base = rec.base if trace_base is None else trace_base
            new = self._new_raw
            if new is not None:
                name = self._encoded.get(rec.name)
                if name is None:
                    if len(self._encoded) >= 1 << 16:
                        self._encoded.clear()
                    name = self._encoded[rec.name] = rec.name.encode("utf-8", "replace")
                tid = new(pend[0], pend[1], base, name, pend[2])
            else:
                tid = int(self._lib.tensor_new(pend[0], pend[1], base, rec.name, pend[2]))
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
            srec = _records.StorageRec(ptr, nbytes, device, external, self.epoch, skey,
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
        rec = _records.TensorRec(skey, name, base_id, (tptr, t.nbytes, stack))
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
        if began >= self._next_tick and forward:
            # the C path's tick (dispatch.c) on this path's clock: one
            # comparison per op once the program marks (_next_tick infinite)
            started = self._next_tick > 0
            self._next_tick = began + self.tick_s
            if started:
                try:
                    self._tick()
                except Exception as exc:  # never break the user's program
                    self._recording_failed(func, exc)
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
