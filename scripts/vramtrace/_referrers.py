"""Who holds this object? A bounded walk up ``gc.get_referrers``.

Starting from some objects (tensors past their last use), the walk goes up
the referrer graph breadth first, describing each hop the way a person would
read it: a list index ``[1]``, a dict key ``['acts']``, an attribute
``.output_tensors`` (through the owning object's ``__dict__``), a closure
cell ``closure cell 'x' of fn``, a frame local ``local 'y' in fn file:line``.
Holders are named by the type of the holding object ("Context", "list",
"function <lambda>", "module train").

It is bounded (depth, referrers per object, total objects) because the heap
can be huge, and it never keeps what it found alive: objects are held in one
dict for the duration of the walk, and that dict is excluded from the
referrers it reports, as are frames of vramtrace itself.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

__all__ = ["NodeKey", "Edge", "WalkResult", "walk_referrers", "holder_name"]

# A node of the walk: ("t", tensor id) for a tracked tensor (known to the
# recorder already), ("o", id(obj)) for any other holding object.
NodeKey = Tuple[str, int]


@dataclass(frozen=True)
class Edge:
    """``src`` holds ``dst`` through ``label``."""
    src: NodeKey
    dst: NodeKey
    label: str


@dataclass
class WalkResult:
    """What a walk found."""
    names: Dict[NodeKey, str] = field(default_factory=dict)      # object nodes only
    edges: List[Edge] = field(default_factory=list)
    # For each start node: the farthest holder on its first-found chain
    # (what a "reference cycle collected by gc" holder should point at).
    tops: Dict[NodeKey, NodeKey] = field(default_factory=dict)
    # Identity of object nodes across walks: (id, name) stays valid while the
    # object lives; weakrefs where the type allows them.
    objects: Dict[NodeKey, Any] = field(default_factory=dict)


_MAX_LABEL = 60


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_LABEL else text[:_MAX_LABEL - 3] + "..."


def holder_name(obj: Any) -> str:
    """How a holding object is named in a retention path."""
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__name__}"
    if isinstance(obj, types.MethodType):
        return f"method {getattr(obj.__func__, '__name__', '?')}"
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, type):
        return f"class {obj.__name__}"
    return type(obj).__name__


def _dict_owner(d: dict, ignore: Set[int]) -> Optional[Any]:
    """The object whose ``__dict__`` is ``d`` (an instance or a module)."""
    for r in gc.get_referrers(d):
        if id(r) in ignore or isinstance(r, (dict, list, tuple, types.FrameType)):
            continue
        try:
            if object.__getattribute__(r, "__dict__") is d:
                return r
        except Exception:
            continue
    return None


def _closure_owners(cell: Any, ignore: Set[int]) -> List[Tuple[Any, str]]:
    """(function, free variable name) for each function closing over ``cell``."""
    out: List[Tuple[Any, str]] = []
    for tup in gc.get_referrers(cell):
        if type(tup) is not tuple or id(tup) in ignore:
            continue
        for fn in gc.get_referrers(tup):
            if isinstance(fn, types.FunctionType) and fn.__closure__ is tup:
                for i, c in enumerate(tup):
                    if c is cell:
                        out.append((fn, fn.__code__.co_freevars[i]))
    return out


def _attr_labels(owner: Any, child: Any) -> List[str]:
    """Attribute names of ``owner`` (instance dict or slots) that hold ``child``."""
    labels: List[str] = []
    try:
        d = object.__getattribute__(owner, "__dict__")
    except Exception:
        d = None
    if isinstance(d, dict):
        labels.extend(f".{k}" for k, v in list(d.items()) if v is child)
    for cls in type(owner).__mro__:
        for slot in cls.__dict__.get("__slots__", ()) or ():
            if isinstance(slot, str):
                try:
                    if object.__getattribute__(owner, slot) is child:
                        labels.append(f".{slot}")
                except Exception:
                    pass
    return labels


def _container_labels(container: Any, child: Any) -> List[str]:
    """Index or key labels of ``child`` inside a list/tuple/dict/set/deque."""
    if isinstance(container, dict):
        return [f"[{_short(k)}]" for k, v in list(container.items()) if v is child] + \
               [f"key {_short(k)}" for k in list(container) if k is child]
    if isinstance(container, (list, tuple)) or type(container).__name__ == "deque":
        return [f"[{i}]" for i, v in enumerate(list(container)) if v is child]
    if isinstance(container, (set, frozenset)):
        return ["{element}"]
    return []


_CO_OPTIMIZED = 0x0001   # inspect.CO_OPTIMIZED: a function's fast locals


class _Locals:
    """Frame locals of every thread, indexed by the id of the value.

    Reading ``frame.f_locals`` of a running function copies its locals into
    a dict cached on the frame, which then keeps them alive after the
    function deletes them. The copy is emptied again after the scan (when no
    tracer could write it back), so a walk never extends a lifetime.
    """

    def __init__(self, skip_files: FrozenSet[str], max_frames: int = 64) -> None:
        self.by_id: Dict[int, List[Tuple[int, str, str]]] = {}
        self.frames: Dict[int, str] = {}
        tracing = sys.gettrace() is not None or sys.getprofile() is not None
        me = threading.get_ident()
        for tid, frame in list(sys._current_frames().items()):
            n = 0
            f: Optional[types.FrameType] = frame
            while f is not None and n < max_frames:
                co = f.f_code
                if co.co_filename not in skip_files:
                    self._scan(f, co, tracing or tid != me)
                f = f.f_back
                n += 1
            del f
        del frame

    def _scan(self, f: types.FrameType, co: types.CodeType, keep: bool) -> None:
        optimized = bool(co.co_flags & _CO_OPTIMIZED)
        if not optimized and f.f_locals is f.f_globals:
            return  # module-level code: its locals are the module's globals
        where = f"{co.co_name} {os.path.basename(co.co_filename)}:{f.f_lineno}"
        self.frames[id(f)] = "frame"
        try:
            loc = f.f_locals
        except Exception:
            return
        try:
            for name, value in list(loc.items()):
                self.by_id.setdefault(id(value), []).append((id(f), name, where))
                del value
        finally:
            # A module's or class body's f_locals is its namespace: never touched.
            if optimized and not keep and f.f_trace is None:
                loc.clear()
            del loc


def walk_referrers(starts: Dict[NodeKey, Any],
                   tensor_key: Callable[[Any], Optional[NodeKey]],
                   *,
                   skip_files: Iterable[str] = (),
                   ignore_ids: Iterable[int] = (),
                   max_depth: int = 8,
                   max_breadth: int = 8,
                   max_nodes: int = 512,
                   use_frames: bool = True) -> WalkResult:
    """Walk up the referrers of ``starts`` (node key -> object).

    ``tensor_key(obj)`` returns the node key of a tracked tensor, so that a
    tensor holding another (``t.extra = u``) appears as itself. Objects whose
    id is in ``ignore_ids`` (the caller's own bookkeeping) are skipped.
    """
    w = _Walker(tensor_key, frozenset(skip_files), set(ignore_ids),
                max_depth, max_breadth, max_nodes)
    try:
        return w.run(starts, use_frames)
    finally:
        w.held.clear()


class _Walker:
    """State of one walk. A class, not closures: cells of a closure would
    show up as referrers of the very objects being walked."""

    def __init__(self, tensor_key: Callable[[Any], Optional[NodeKey]],
                 skip: FrozenSet[str], ignore: Set[int],
                 max_depth: int, max_breadth: int, max_nodes: int) -> None:
        self.tensor_key = tensor_key
        self.skip = skip
        self.max_depth = max_depth
        self.max_breadth = max_breadth
        self.max_nodes = max_nodes
        self.res = WalkResult()
        self.held: Dict[int, Any] = {}        # the only strong references kept
        self.key_of: Dict[int, NodeKey] = {}  # id(obj) -> node
        self.obj_of: Dict[NodeKey, int] = {}  # node -> id(obj)
        self.depth: Dict[NodeKey, int] = {}
        self.origin: Dict[NodeKey, NodeKey] = {}
        self.queue: List[NodeKey] = []
        self.seen: Set[Tuple[NodeKey, NodeKey, str]] = set()
        self.ignore = ignore
        ignore.update(id(x) for x in (self.held, self.res.objects, self.res.names,
                                      self.res.tops, self.res.edges, self.__dict__,
                                      gc.garbage))

    def node_for(self, obj: Any) -> NodeKey:
        k = self.key_of.get(id(obj))
        if k is None:
            k = self.tensor_key(obj) or ("o", id(obj))
            self.key_of[id(obj)] = k
            if k[0] == "o":
                self.res.names[k] = holder_name(obj)
                self.res.objects[k] = obj
        return k

    def add(self, src_obj: Any, dst: NodeKey, label: str) -> None:
        src = self.node_for(src_obj)
        e = (src, dst, label)
        if e in self.seen or src == dst:
            return
        known = src in self.depth
        if not known and len(self.depth) >= self.max_nodes:
            return
        self.seen.add(e)
        self.res.edges.append(Edge(src, dst, label))
        if known:
            return
        d = self.depth[src] = self.depth[dst] + 1
        org = self.origin[src] = self.origin[dst]
        if d > self.depth.get(self.res.tops[org], 0):
            self.res.tops[org] = src
        self.held[id(src_obj)] = src_obj
        self.obj_of[src] = id(src_obj)
        if not isinstance(src_obj, (types.ModuleType, type)) and d < self.max_depth:
            self.queue.append(src)

    def run(self, starts: Dict[NodeKey, Any], use_frames: bool) -> WalkResult:
        self.ignore.add(id(starts))
        for key, obj in starts.items():
            self.held[id(obj)] = obj
            self.key_of[id(obj)] = key
            self.obj_of[key] = id(obj)
            self.depth[key] = 0
            self.origin[key] = key
            self.res.tops[key] = key
            self.queue.append(key)
        locals_ix = _Locals(self.skip) if use_frames else None
        if locals_ix is not None:
            self.ignore.add(id(locals_ix.by_id))
        i = 0
        while i < len(self.queue):
            key = self.queue[i]
            i += 1
            if locals_ix is not None:
                self.frame_edges(locals_ix, key)
            self.expand(key)
        return self.res

    def frame_edges(self, locals_ix: "_Locals", key: NodeKey) -> None:
        for fid, name, where in locals_ix.by_id.get(self.obj_of[key], ()):
            fkey: NodeKey = ("f", fid)
            self.res.names[fkey] = locals_ix.frames[fid]
            e = (fkey, key, name)
            if e not in self.seen:
                self.seen.add(e)
                self.res.edges.append(Edge(fkey, key, f"local '{name}' in {where}"))

    def expand(self, key: NodeKey) -> None:
        obj = self.held.get(self.obj_of[key])
        if obj is None:
            return
        n = 0
        for r in gc.get_referrers(obj):
            if n >= self.max_breadth:
                break
            if id(r) in self.ignore or isinstance(r, types.FrameType):
                continue
            for src_obj, label in self.describe(r, obj):
                self.add(src_obj, key, label)
            n += 1

    def describe(self, r: Any, obj: Any) -> List[Tuple[Any, str]]:
        """(holder, label) pairs for referrer ``r`` of ``obj``."""
        if isinstance(r, dict):
            owner = _dict_owner(r, self.ignore)
            if owner is not None and owner is not obj:
                return [(owner, f".{k}") for k, v in list(r.items()) if v is obj]
            return [(r, lb) for lb in _container_labels(r, obj)]
        if isinstance(r, (list, tuple, set, frozenset)) or type(r).__name__ == "deque":
            if type(r) is tuple and _closure_owners_quick(r):
                return []  # a closure tuple: reported at the cell
            return [(r, lb) for lb in _container_labels(r, obj)]
        if type(r).__name__ == "cell":
            made = [(fn, f"closure cell '{var}' of {fn.__name__}")
                    for fn, var in _closure_owners(r, self.ignore)]
            return made or [(r, "cell")]
        if isinstance(r, types.MethodType):
            return [(r, ".__self__" if r.__self__ is obj else ".__func__")]
        if isinstance(r, types.FunctionType):
            return [(r, ".__defaults__")]
        return [(r, lb) for lb in _attr_labels(r, obj)] or [(r, "(referent)")]


def _closure_owners_quick(tup: tuple) -> bool:
    """True when ``tup`` is made of cells only (a function's __closure__)."""
    return len(tup) > 0 and all(type(c).__name__ == "cell" for c in tup)
