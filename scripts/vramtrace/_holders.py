"""Turn referrer walks into holders and references in the trace.

The recorder knows tensors (by id) and holders (by id); a walk knows Python
objects. This book keeps the mapping from a live Python object to its holder
id across walks (so a list that keeps leaking is one holder, not one per
mark) and the set of references currently asserted, so that a later walk
that no longer finds a reference retracts it with ``unref``.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

from ._referrers import Edge, NodeKey, WalkResult

__all__ = ["HolderBook"]

_Ref = Tuple[int, int, str]


class HolderBook:
    """Holder ids of Python objects, and the references asserted so far."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        # (id(obj), name) -> (holder id, weakref or None)
        self._ids: Dict[Tuple[int, str], Tuple[int, Optional[weakref.ref]]] = {}
        self._named: Dict[str, int] = {}      # holders that are not objects
        self._scopes: Dict[str, Dict[Tuple[int, int], str]] = {}
        # Targets of the references in _scopes (a superset): a tensor's death
        # looks through the scopes only when it was a target.
        self._targeted: Set[int] = set()
        # Each scope's references by their target: a death drops its own
        # without a look at every reference (a snapshot's walk of kept graphs
        # asserts a quarter of a million, and each death scanned them all).
        self._by_target: Dict[str, Dict[int, List[Tuple[int, int]]]] = {}

    def holder(self, obj: Any, name: str) -> int:
        """The holder id of ``obj`` (made on first sight)."""
        key = (id(obj), name)
        got = self._ids.get(key)
        if got is not None:
            hid, wr = got
            if wr is None or wr() is obj:
                return hid
        hid = int(self._lib.holder_new(name))
        try:
            wr = weakref.ref(obj, lambda _r, k=key: self._ids.pop(k, None))
        except TypeError:
            wr = None  # lists, dicts, frames: identified by id while they live
        self._ids[key] = (hid, wr)
        return hid

    def named(self, name: str, fresh: bool = False) -> int:
        """A holder that is not a Python object ("reference cycle ...")."""
        if fresh or name not in self._named:
            self._named[name] = int(self._lib.holder_new(name))
        return self._named[name]

    def collection(self, name: str) -> int:
        """A new holder standing for one run of the garbage collector: the
        tensors it references are the ones that run freed."""
        return int(self._lib.holder_new(name, gc_collection=True))

    def node_id(self, key: NodeKey, res: WalkResult, frame_ids: Dict[int, int]) -> int:
        """Recorder id of a walk node: the tensor id, or a holder id."""
        kind, ident = key
        if kind == "t":
            return ident
        if kind == "f":
            # Frames take no weakrefs: known by id and name while they run.
            name = res.names.get(key, "frame")
            got = self._ids.get((ident, name))
            if got is None:
                got = (int(self._lib.holder_new(name)), None)
                self._ids[(ident, name)] = got
            return got[0]
        return self.holder(res.objects[key], res.names[key])

    def emit(self, res: WalkResult, scope: Optional[str] = None,
             extra: Tuple[Edge, ...] = (), extra_ids: Optional[Dict[NodeKey, int]] = None,
             only: Optional[Set[int]] = None, again: bool = False) -> Set[_Ref]:
        """Assert the references of ``res`` (plus ``extra``).

        The walk's references are recorded before ``extra``'s: a collection's
        references to the tensors it freed (extra) mark the moment the checker
        shows what held them, so the cycle the walk found must exist by then.
        With a ``scope``, references that scope asserted before and that this
        walk did not find again are retracted (``unref``). With ``only`` (the
        tensor ids a partial walk started from), just the references to
        those are: the others stay asserted, and in the scope.

        ``again`` (a snapshot's walk): every reference found is asserted
        again and every holder in it named again (``tensor_name`` on its
        id), though asserted before: on a run longer than the ring, the
        events that declared them may be gone, and the snapshot's chains
        must not stop at a nameless holder."""
        if not res.edges and not extra and not (scope is not None and self._scopes.get(scope)):
            return set()   # nothing to assert, nothing to retract (a clean loop's marks)
        frame_ids: Dict[int, int] = {}
        ids = dict(extra_ids or {})
        now: Dict[Tuple[int, int], str] = {}
        holder_names: Dict[int, str] = {}   # (again) holder id -> its name
        groups: List[List[Tuple[int, int]]] = []

        def resolve(key: NodeKey) -> int:
            got = ids.get(key)
            if got is None:
                got = ids[key] = self.node_id(key, res, frame_ids)
                if again and key[0] != "t" and key in res.names:
                    holder_names[got] = res.names[key]
            return got
        for edges in (res.edges, extra):
            group = []
            for e in edges:
                src, dst = resolve(e.src), resolve(e.dst)
                if (src, dst) not in now:
                    now[(src, dst)] = e.label
                    group.append((src, dst))
            groups.append(sorted(group))
        # unref takes no label: a pair is one reference, its label the first found.
        before = self._scopes.get(scope, {}) if scope is not None else {}
        for pair in groups[0] + groups[1]:
            if again or before.get(pair) != now[pair]:
                self._lib.ref(pair[0], pair[1], now[pair])
        if holder_names and getattr(self._lib, "can_rename", False):
            for hid, name in holder_names.items():   # after the refs: their nodes exist
                self._lib.tensor_name(hid, name)
        if scope is not None:
            for pair in sorted(set(before) - set(now)):
                if only is None or pair[1] in only:
                    self._lib.unref(pair[0], pair[1])
                else:
                    now[pair] = before[pair]
            self._scopes[scope] = now
            by_target: Dict[int, List[Tuple[int, int]]] = {}
            for pair in now:
                by_target.setdefault(pair[1], []).append(pair)
            self._by_target[scope] = by_target
            self._targeted.update(by_target)
        return set((s, d, lb) for (s, d), lb in now.items())

    def forget_target(self, tensor_id: int) -> None:
        """A tensor died: its references no longer need retracting."""
        if tensor_id not in self._targeted:
            return
        self._targeted.discard(tensor_id)
        for scope, refs in self._scopes.items():
            for pair in self._by_target[scope].pop(tensor_id, ()):
                refs.pop(pair, None)
