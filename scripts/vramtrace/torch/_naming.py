"""How tracked tensors are named: after the line that made them, after the
model's name of a parameter (and its ``.grad``), or as the program named them.
"""

from __future__ import annotations

import io
import linecache
import os
import tokenize
import weakref
from typing import Any, Dict, Optional, Set, Tuple

from .._referrers import instances_of
from ._records import _TensorRec

import torch as _torch


_MAX_SOURCE = 60   # characters of a source line kept in a tensor's name


def _without_comment(src: str) -> str:
    """``src`` (one line) less its trailing comment: a name quotes the code,
    and a comment took the characters a long line's code needed
    (``kept.append(x[:, -1].detach()) # LEAK: a vie...``). Found by the
    tokenizer, so that a ``#`` inside a string stays; a line it cannot
    read (a string or bracket that the line does not close) is kept whole
    up to where it stopped reading."""
    if "#" not in src:
        return src
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                return src[:tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return src


def _source_line(filename: str, line: int) -> str:
    """Line ``line`` of ``filename`` as the user wrote it, without its
    comment, whitespace runs made one space, cut at _MAX_SOURCE characters;
    "" when it cannot be read or is all comment."""
    try:
        src = _without_comment(" ".join(linecache.getline(filename, line).split()))
    except Exception:
        return ""
    return src[:_MAX_SOURCE - 3] + "..." if len(src) > _MAX_SOURCE else src


_MAX_DECORATORS = 20   # lines looked past a decorator for its function's def


def _past_decorators(filename: str, line: int) -> int:
    """``line``, or where the function whose first decorator is on it is
    defined: a compiled function's frame stands at its first line, which for
    a decorated function (transformers' forwards) is a decorator, not what
    it does."""
    try:
        if not linecache.getline(filename, line).lstrip().startswith("@"):
            return line
        for k in range(line + 1, line + 1 + _MAX_DECORATORS):
            text = linecache.getline(filename, k).lstrip()
            if text.startswith(("def ", "async def ")):
                return k
    except Exception:
        pass
    return line


def _site_name(filename: str, line: int, what: str) -> str:
    """``what`` (an op's output) named by the source line that made it, as
    the user wrote it: ``h = model(x) (train.py:40, aten.relu out[0])``."""
    line = _past_decorators(filename, line)
    src = _source_line(filename, line)
    where = f"{os.path.basename(filename)}:{line}"
    return f"{src} ({where}, {what})" if src else f"{what} at {where}"


class _Naming:
    """The tracker's naming of tensors (a mixin of :class:`Tracker`)."""

    def _named_at(self, stack: int, what: str) -> str:
        """``what`` named by the user's line that stack id ``stack`` stands
        at (_site_name), or ``what`` alone where the stack has no such line."""
        site = self._stacks.sites.get(stack) if stack else None
        return _site_name(site[0], site[1], what) if site is not None else what

    def _made_site(self, addr: int) -> Optional[Tuple[str, int]]:
        """(file, line) of the program's line that allocated the observed
        allocator's live block at ``addr`` after track() began; None where
        there is none (or the library cannot say). For a tensor no op
        showed being made: inductor's generated code allocates its buffers
        with ``empty_strided_cuda``, which calls no op, and returns views of
        them its kernels wrote (nanoGPT's compiled logits). Of the
        allocation's frames, the innermost line of the program's own code
        that is a statement: a compiled function's frame stands at its
        ``def`` (its code runs as the frame's, before its first line), so
        its caller's line names it."""
        block_stack = getattr(self._lib, "block_stack", None)   # a test's fake: none
        stack, seq = block_stack(addr) if block_stack is not None else (0, 0)
        if not stack or seq <= self._began_at:
            return None
        key = ("made at", stack)   # frames read once a stack
        got = self._names.get(key)
        if got is None:
            got = ()
            for file, line, _fn in self._lib.stack_python_frames(stack):
                if not line or not self._stacks.programs(file):
                    continue
                src = _source_line(file, line)
                if src and not src.startswith(("def ", "async def ", "@")):
                    got = (file, line)
                    break
            if len(self._names) >= 1 << 16:
                self._names.clear()
            self._names[key] = got
        return got or None

    def _set_name(self, tid: int, label: str) -> None:
        """Rename recorded tensor ``tid`` through ctypes, which says why the
        library refuses: records.c's set_name() asks here only where its
        own call of vt_tensor_name failed (or it has none)."""
        self._lib.tensor_name(tid, label)

    def _rename(self, t: Any, label: str) -> bool:
        rec = self._by_obj.get(id(t))
        if rec is None:
            return False
        self._fast.name_record(rec, label)   # the rule: native/trackfast/records.c
        return True

    def _left_their_models(self, before: Dict[int, str], found: Set[int]) -> None:
        """After a lookup of the models (``before``: the names the last one
        gave, ``found``: the ids of the parameters the models hold now): a
        parameter a model named that no model holds any more (a head the
        program replaced, kept by its optimizer) is named by the line that
        first used it again, one another model holds now by that model's
        name, never by a place it left; the index forgets parameters that
        are gone."""
        for key, (ref, name) in list(self._param_names.items()):
            p = ref()
            if p is None:
                del self._param_names[key]
                self._first_sight.pop(key, None)
                continue
            was = before.get(key)
            if was is not None and key not in found:
                self._param_names[key] = (ref, "")
                first = self._first_sight.pop(key, None)
                if first is not None and first[0]() is p:
                    self._rename(p, first[1])
            elif was is not None and name != was and self._rename(p, name):
                self._param_labels.add(name)
            del p

    def _name_param(self, t: Any, rec: Any, name: str) -> None:
        """Name parameter ``t`` (record ``rec``, named by its first sight)
        as its model knows it, remembering the first-sight name for when it
        leaves the model (_left_their_models)."""
        first = rec.name
        if self._rename(t, name):
            self._first_sight[id(t)] = (weakref.ref(t), first)
            self._param_labels.add(name)

    def _param_name(self, param: Any, look: bool) -> Tuple[str, bool]:
        """A parameter's name in the model that holds it, as the program knows
        it: ``GPT.transformer.h.0.attn.c_attn.weight`` (the model's class,
        then ``named_parameters()``'s name), and whether the models were
        looked up for it. The models alive are looked up (``look``: one pass
        over the collector's objects, at most once a mark: _Marks) when a
        parameter is not known yet; "" when none holds it (remembered too: a
        parameter no model holds is not looked up again)."""
        known = self._param_names.get(id(param))
        if known is not None and known[0]() is param:
            return known[1], False
        if not look:
            return "", False
        self.model_lookups += 1
        self._param_names[id(param)] = (weakref.ref(param), "")
        try:
            modules = instances_of(_torch.nn.Module)
            inner = {id(c) for m in modules for c in m._modules.values() if c is not None}
            # the models alive now, all of them: what an earlier lookup
            # found and is gone leaves the index
            self._model_state.clear()
            self._model_of.clear()
            before = {k: v[1] for k, v in self._param_names.items() if v[1]}
            found = set()
            for root in modules:
                if id(root) in inner:
                    continue
                prefix = type(root).__name__
                state = []
                for n, p in root.named_parameters():
                    self._param_names[id(p)] = (weakref.ref(p), f"{prefix}.{n}")
                    self._model_of[id(p)] = id(root)
                    found.add(id(p))
                    state.append((weakref.ref(p), ""))
                for n, b in root.named_buffers():
                    state.append((weakref.ref(b), f"{prefix}.{n}"))
                self._model_state[id(root)] = (weakref.ref(root), state)
            del modules
            self._left_their_models(before, found)
        except Exception:  # noqa: BLE001 - a name is a nicety
            return "", True
        known = self._param_names.get(id(param))
        return (known[1] if known is not None and known[0]() is param else ""), True
