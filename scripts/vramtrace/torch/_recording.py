"""Recording ops: the dispatch mode, the names of what ops make, and the
frames a backward op on an autograd engine thread runs under (trampolines
named after the forward op's). The rules that change the books -- an op's
uses and outputs, a tensor's first sight and its death -- are the C
extension's (``native/trackfast/``: dispatch.c, tensors.c); the ops reach
them through the mode's C ``__torch_dispatch__`` or the op observer.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import types
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .. import _gc_hold
from ._naming import _site_name, _source_line
from ._torch_facts import _current_node, _op_flags, _view_arg
if TYPE_CHECKING:   # only for annotations: _tracker imports this module
    from ._tracker import Tracker

from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode


class _Mode(_TorchDispatchMode):
    """The dispatch mode: its ``__torch_dispatch__`` is the C path's."""

    def __init__(self, tracker: "Tracker") -> None:
        super().__init__()
        self._tracker = tracker
        # PyTorch looks __torch_dispatch__ up on the mode object: the C
        # one, bound to the mode like a method, replaces the class's.
        self.__torch_dispatch__ = types.MethodType(tracker._fast.dispatch, self)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles with the mode off and runs what it compiled
        with the mode on: a mode saying False here makes Dynamo skip every
        frame ("non-infra torch dispatch mode present") and run the program
        eagerly instead (its backend never called; fullgraph=True raises)."""
        return True

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):  # noqa: D105
        return self._tracker._fast.dispatch(self, func, types_, args, kwargs)


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


def _engine_op(tracker: "Tracker", func: Any, args: Any, kwargs: Any) -> Any:
    """Run an autograd engine thread's op and hand it to the C path, which
    records it with the frames it runs under."""
    out = func(*args, **(kwargs or {}))
    token = _gc_hold.hold()   # the recording is the tracker's work, not the op
    try:
        tracker._fast.engine_op(func, args, kwargs, out)
    finally:
        _gc_hold.release(token)
    return out


_get_ident = threading.get_ident
_perf_counter = time.perf_counter
_MAX_NODE_STACKS = 1 << 16     # remembered forward ops before starting over
_FORWARD_FRAMES = 16           # innermost forward frames replayed in backward (at least)
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
    run = _trampoline(*frames[0], True)
    for name, filename, line in frames[1:]:
        run = functools.partial(_trampoline(name, filename, line, False), run)
    return run


class _Recording:
    """What the C recording asks of the tracker per op: names, an op's
    kind, engine threads' frames, failures (a mixin of :class:`Tracker`)."""

    def tensor_id(self, t: Any) -> int:
        """The recorder id of tensor ``t`` (0 when not tracked)."""
        rec = self._by_obj.get(id(t))
        return self._fast.record(rec) if rec is not None else 0

    def _out_name(self, func: Any, i: int, stack: int, forward: bool = True) -> str:
        """An output's name: the user's line that made it, then the op
        ("y = torch.tanh(x @ w) (train.py:12, aten.mm out[0])"); the op
        alone when there is no stack. An op of the backward pass is named
        by the line of its forward op ("..., backward: aten.mm out[0])")."""
        key = (id(func), i if forward else -1 - i, stack)   # a backward name apart
        got = self._names.get(key)
        if got is None:
            packet = getattr(func, "overloadpacket", func)
            got = self._named_at(stack, f"{packet} out[{i}]" if forward
                                 else f"backward: {packet} out[{i}]")
            if len(self._names) >= 1 << 16:
                self._names.clear()
            self._names[key] = got
        return got

    def _input_name(self, is_param: bool, stack: int, addr: int = 0) -> str:
        """The name of a tensor first seen as an op's input (made before
        track() began, or where no op showed it being made: a parameter's
        memory made by ``nn.Linear``): what it is and the user's line that
        first used it, ``parameter, first used by "self.head = nn.Linear(d, h)"
        (model.py:41)``; a parameter is renamed after its model's name for it
        at the next mark that finds one (_grads_follow_parameters). A tensor
        on memory PyTorch's allocator handed out since track() began, at
        ``addr`` (its storage's, 0: not known), is named by the program's
        line that allocated it (_made_site): a compiled region's output,
        ``logits, loss = model(X, Y) (train.py:224, made where no op showed
        it)`` where it read ``input, first used by "kept.append(...)"``."""
        site = self._made_site(addr) if addr and not is_param else None
        if site is not None:
            return _site_name(site[0], site[1], "made where no op showed it")
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

    def _meta_of(self, func: Any) -> Tuple[int, int, Any]:
        """(index of the argument ``func``'s outputs view, -1: none; its
        OP_* flags (_torch_facts._op_flags); the op), cached.
        Keyed by id: an OpOverload hashes in Python (a call per lookup);
        the entry keeps the op alive, so its id stays its own."""
        meta = self._op_meta[id(func)] = (_view_arg(func), _op_flags(func), func)
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
            return run(_engine_op, (self, func, args, kwargs))
        return _engine_op(self, func, args, kwargs)

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
        Python for the node would give it a Python object.) The observer
        asks here only for a number the extension's table of them lost
        (native/trackfast/lent.c)."""
        sid = self._forward_stack(seq)
        return self._lent_for(sid) if sid else 0

    def _lent_for(self, sid: int) -> int:
        """The stack id of forward stack ``sid``'s frames named "forward of
        ...", interned once (the extension's lent table is written with it
        as each forward op is recorded)."""
        lent = self._lent_frames.get(sid)
        if lent is None:
            frames = self._stacks.frames.get(sid) or []
            lent = self._stacks.intern_frames([(_FORWARD_LABEL.format(name), filename, line)
                                               for name, filename, line in
                                               self._frames_to_lend(frames)])
            if len(self._lent_frames) >= _MAX_NODE_STACKS:
                self._lent_frames.clear()
            self._lent_frames[sid] = lent
        return lent

    def _frames_to_lend(self, frames: List[Tuple[str, str, int]]) -> List[Tuple[str, str, int]]:
        """Of a forward op's frames (innermost first), the ones its backward
        ops run under: the innermost _FORWARD_FRAMES, and further out
        through the innermost frame of the program's own code where none of
        those is: that line names what the backward makes, and a model
        called through a library's layers (a Hugging Face model's block
        runs its ops some 20 frames under the line that called it) puts it
        further out than the innermost few."""
        if len(frames) <= _FORWARD_FRAMES:
            return frames
        programs = self._stacks.programs
        own = next((i for i, (_name, filename, _line) in enumerate(frames)
                    if programs(filename)), -1)
        return frames[:max(_FORWARD_FRAMES, own + 1)]

    def _forward_of(self) -> Any:
        """What runs a backward op of this engine thread under the Python
        frames of the forward op it differentiates (None: none known)."""
        sid = self._forward_stack()
        if not sid:
            return None
        run = self._forward_frames.get(sid)
        if run is None:
            frames = self._stacks.frames.get(sid)
            run = _forward_runner(self._frames_to_lend(frames)) if frames else None
            if len(self._forward_frames) >= _MAX_NODE_STACKS:
                self._forward_frames.clear()
            self._forward_frames[sid] = run
        return run
