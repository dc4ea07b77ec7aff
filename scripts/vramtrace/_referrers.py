"""Who holds this object? A bounded walk up ``gc.get_referrers``.

Starting from some objects (tensors past their last use), the walk goes up
the referrer graph breadth first, describing each hop the way a person would
read it: a list index ``[1]``, a dict key ``['acts']``, an attribute
``.output_tensors`` (through the owning object's ``__dict__``), a closure
cell ``closure cell 'x' of fn``, a frame local ``local 'y' in fn file:line``.
Holders are named by the type of the holding object ("Context", "list",
"function <lambda at train.py:12>", "module train"); the names and the hops'
labels are ``_hop_labels``'.

It is bounded because the heap can be huge: one pass over the heap per
level of the walk, for all the objects of that level together
(:func:`referrers_of`), then ``gc.get_referents`` of each referrer found to
tell which of them it holds and how; depth, referrers per object and the
holders found are capped (``WalkResult.capped``), and a deadline stops the
walk between levels (``WalkResult.cut_off``). An
instance's ``__dict__`` and a function's closure cells are reached as
objects of their own and folded into one labelled edge at the end
(``.attr``, ``closure cell 'x' of fn``). The walk never keeps what it found
alive: objects are held in one dict for the duration of the walk, and that
dict is excluded from the referrers it reports, as are frames of vramtrace
itself.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import types
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from . import _gc_hold
from ._hop_labels import (_CACHE, _CO_OPTIMIZED, _attr_labels, _container_labels,
                          _frame_labels, _hidden_field_labels, _tensor_attr_labels,
                          holder_name, thread_local_owner)

__all__ = ["NodeKey", "Edge", "WalkResult", "walk_referrers", "walk_running_frames",
           "holder_name", "referrers_of",
           "instances_of", "level_passes", "use"]

# gc.get_referrers(*objs) compares every reference in the heap with each of
# objs in turn: each object looked for adds about 1/_GC_OBJECTS_PER_PASS of a
# heap pass. The compiled pass (_trackfast.referrers_of, referrers.c) looks
# each reference up in a hash set: about two heap passes whatever the number
# (one is gc.get_objects()), so it serves from _NATIVE_FROM objects on
# (tests/bench/bench_referrers.py measures both).
_GC_OBJECTS_PER_PASS = 30
_NATIVE_FROM = 32
# A walk deeper than _INDEX_AFTER levels reads the rest from an index of
# every reference between the collector's objects (_trackfast.ReferrerIndex,
# referrers.c), built in one pass for the price of a few heap passes of one
# object (_index_passes: 3-5, tests/bench/bench_referrers.py; measured again
# at each build); each level after is a lookup. A pass per level made a walk
# to depth 8 (an attribute is two levels: the owner's __dict__, then the
# owner) cost 8 passes or more: an EMA model's parameters, unused at the
# first mark, took a short program's whole credit, and its kept evaluation
# outputs were found with no holder. Built only after _INDEX_AFTER levels,
# so that a walk that ends there (a list a local holds: two; a module's
# global, an object's attribute: three) pays what it did, and a deeper one
# _INDEX_AFTER + _index_passes at most whatever its depth; nor for a level
# of modules' namespaces alone, whose referrers end the walk (the module,
# its functions' __globals__).
_INDEX_AFTER = 3
_index_passes = 4.0
# Its tables take about 100 bytes of host memory an object for the walk's
# time (30 MB with torch loaded, 300,000 objects): a heap of more objects
# than this is walked a pass a level, as before, and the next
# _INDEX_REFUSED_WALKS walks do not ask again (the refusal costs a listing
# of the heap, gc.get_objects(): half a pass, for nothing).
_INDEX_MAX_OBJECTS = 1_000_000
_INDEX_REFUSED_WALKS = 32
_index_refused = 0   # walks left that do not ask
_native_referrers: Optional[Callable[[List[Any]], List[Any]]] = None
_native_instances: Optional[Callable[[List[Any], type], List[Any]]] = None
_native_index: Optional[Callable[[], Any]] = None
_native_frame_stack: Optional[Callable[[Any], Any]] = None


def _native_for(n: int) -> bool:
    """Whether a level of ``n`` objects goes through the compiled pass."""
    return _native_referrers is not None and n >= _NATIVE_FROM


def use(mod: Any) -> None:
    """Take the loaded _trackfast's one-pass referrers and type filter,
    where it has them."""
    global _native_referrers, _native_instances, _native_index, _native_frame_stack
    _native_referrers = getattr(mod, "referrers_of", None)
    _native_instances = getattr(mod, "instances_of", None)
    _native_index = getattr(mod, "ReferrerIndex", None)
    _native_frame_stack = getattr(mod, "frame_stack", None)


def instances_of(cls: type) -> List[Any]:
    """The objects the collector tracks whose type is ``cls`` or a subclass
    of it: one pass over the heap. By type(), not isinstance(): isinstance
    reads __class__, which some objects compute (torch.distributed's
    deprecated reduce_op warns: the program's output changed); the loop in
    C where the extension has it (in Python it costs more than collecting
    the objects: 100 ms for 300,000 with torch loaded)."""
    objects = gc.get_objects()
    if _native_instances is not None:
        return _native_instances(objects, cls)
    return [o for o in objects if issubclass(type(o), cls)]


def referrers_of(objs: List[Any]) -> List[Any]:
    """The objects the collector tracks that refer to any of ``objs`` (a
    list, which the caller ignores itself): ``gc.get_referrers(*objs)``
    (which leaves out its own argument tuple), through the compiled pass for
    many."""
    if _native_for(len(objs)):
        return _native_referrers(objs)   # type: ignore[misc]
    return gc.get_referrers(*objs)


def level_passes(n: int) -> float:
    """What a level of ``n`` objects costs, in heap passes of one object."""
    gc_cost = 1.0 + n / _GC_OBJECTS_PER_PASS
    return min(gc_cost, 2.0) if _native_for(n) else gc_cost

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
    cut_off: bool = False     # the deadline stopped it before its bounds did
    capped: bool = False      # holders were left out: max_nodes of them found
    levels: int = 0           # levels walked
    passes: float = 0.0       # what they cost, in heap passes of one object (level_passes)
    # Nodes whose referrers a whole level of the walk enumerated (its heap
    # pass ran to the end and no cap left one out): what a walk cut short
    # did not find of theirs is gone; of the others it only went unseen.
    expanded: Set[NodeKey] = field(default_factory=set)

    def add_found(self, other: "WalkResult") -> None:
        """What ``other`` found (its edges and the nodes they name) added
        to this result: a second walk's, from the graphs' roots."""
        self.edges.extend(other.edges)
        self.names.update(other.names)
        self.objects.update(other.objects)

    def add_nodes(self, nodes: Dict[NodeKey, Any]) -> None:
        """Nodes no heap walk met (autograd nodes, hooks' owners), each
        named by its type."""
        for k, node in nodes.items():
            self.names[k] = type(node).__name__
            self.objects[k] = node


_LOCAL_ITEMS = 16        # items of a local tuple or list indexed (_Locals)
# ... for a walk of the running frames alone (walk_running_frames), which
# has no heap pass to find the rest: a list a step appends to is longer
_FRAME_WALK_ITEMS = 4096
# ... and there, containers in the containers a local holds, this deep (a
# deque of namedtuples of tensors: a replay memory's transitions, a list of
# them kept besides), their items counted against _FRAME_WALK_NESTED_ITEMS
# in all: a walk of the frames alone read one level, and named no holder
# of a DQN's transitions kept in a list past their eviction
_FRAME_WALK_NESTING = 3
_FRAME_WALK_NESTED_ITEMS = 1 << 15


def _stack_label(value: Any) -> Optional[str]:
    """What a running frame's value stack holds ``value`` for, as a chain's
    words, or None: a for loop's iterator, or the bound __exit__ (or
    __aexit__) a with block keeps until it ends (its __self__, the context
    manager, is the next hop)."""
    if hasattr(type(value), "__next__"):
        return "for loop's iterator"
    if (isinstance(value, (types.MethodType, types.BuiltinMethodType))
            and getattr(value, "__name__", None) in ("__exit__", "__aexit__")
            and getattr(value, "__self__", None) is not None):
        return "with block"
    return None


class _Locals:
    """Frame locals of every thread, indexed by the id of the value.

    Reading ``frame.f_locals`` of a running function copies its locals into
    a dict cached on the frame, which then keeps them alive after the
    function deletes them. The copy is emptied again after the scan (when no
    tracer could write it back), and inside the tracker's hold on the
    collector's count a dict the scan made is dropped when the hold ends
    (native/trackfast/gc_reads.c: another thread's too), so a walk never
    extends a lifetime.
    """

    def __init__(self, skip_files: FrozenSet[str], max_frames: int = 64,
                 items: int = _LOCAL_ITEMS, namespaces: bool = False) -> None:
        # the frame objects made here are the program's (their frames free
        # them), not the tracker's: native/trackfast/gc_reads.c
        _gc_hold.program_read()
        self.items = items
        # the id of a value -> (the frame's id, the edge's label): "local 'x'
        # in f file:line", or what the frame's value stack holds
        self.by_id: Dict[int, List[Tuple[int, str]]] = {}
        # With ``namespaces``: the globals of the modules whose top level
        # runs now (a script's), by the id of the value: (module, name).
        # A walk names them from the module (``module __main__.x``) after
        # a heap pass; a walk of the running frames alone reads them here.
        self.by_global: Dict[int, List[Tuple[Any, str]]] = {}
        self.namespaces = namespaces
        self.modules: Set[int] = set()   # those read
        self.frames: Dict[int, str] = {}
        # The tuples and lists locals hold (up to _LOCAL_ITEMS items), by
        # the id of each item: what a walk cut off before its first heap
        # pass can still name (an RNN's state, a (h, c) tuple in a local).
        self.containers: Dict[int, Any] = {}
        self.in_container: Dict[int, List[int]] = {}
        self.nested_left = _FRAME_WALK_NESTED_ITEMS
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
        where = f"{co.co_name} {os.path.basename(co.co_filename)}:{f.f_lineno}"
        if not optimized and f.f_locals is f.f_globals:
            # module-level code: its locals are the module's globals (a
            # script's top-level loop's iterator is on its stack)
            if self.namespaces:
                self._scan_namespace(f.f_globals)
            if _native_frame_stack is not None:
                self.frames[id(f)] = "frame"
                self._stack(f, where, f.f_globals)
            return
        self.frames[id(f)] = "frame"
        try:
            loc = f.f_locals
        except Exception:
            return
        try:
            for name, value in list(loc.items()):
                self.by_id.setdefault(id(value), []).append((id(f), f"local '{name}' in {where}"))
                self._contents(value)
                del value
            if optimized and _native_frame_stack is not None:
                self._stack(f, where, loc)
        finally:
            # A module's or class body's f_locals is its namespace: never touched.
            if optimized and not keep and f.f_trace is None:
                loc.clear()
            del loc

    def _stack(self, f: types.FrameType, where: str, names: Dict[str, Any]) -> None:
        """The iterators and the with blocks' __exit__ methods the frame's
        value stack holds that none of its ``names`` (its locals; a module's
        top level, its globals) does, where it can be read
        (_trackfast.frame_stack: a frame calling a Python function): the
        collector does not see a running frame's stack, and a list only a
        for loop's iterator walks (`for x in [t.cuda() for t in data]`), or a
        context manager only its with block holds (`with capture(model):`
        around the loop, its generator's list of activations), read as a
        chain from nowhere."""
        # Those alone: the rest of a stack is a pending call's operands
        # (`out.append(model(x))` keeps `out.append` there while model
        # runs), which a local mostly holds too, and a second root beside
        # the local would split a cause.
        held = [(v, label) for v in _native_frame_stack(f)
                for label in (_stack_label(v),) if label]
        if not held:   # (most frames: what their names hold is not read)
            return
        named = {id(v) for v in list(names.values())}
        for value, label in held:
            # (`with Recorder() as rec:` keeps the manager in a local too)
            whose = value.__self__ if label == "with block" else value
            if id(whose) not in named:
                self.by_id.setdefault(id(value), []).append((id(f), f"{label} in {where}"))
        held.clear()

    def _contents(self, value: Any, depth: int = 1) -> None:
        """The items of a tuple or list (or the values of a dict, in a walk
        of the frames alone) a local holds, up to ``items`` of them. In a
        walk of the frames alone (``namespaces``) also those of a deque and
        of subclasses (a namedtuple), and of the containers in them down to
        _FRAME_WALK_NESTING, _FRAME_WALK_NESTED_ITEMS items in all."""
        kind = type(value)
        if self.namespaces:
            if not isinstance(value, (tuple, list, dict, deque)):
                return
        elif kind not in (tuple, list) and (kind is not dict or self.items <= _LOCAL_ITEMS):
            return
        if not 0 < len(value) <= self.items or id(value) in self.containers:
            return
        nested = self.namespaces and depth < _FRAME_WALK_NESTING
        if depth > 1:
            if self.nested_left < len(value):
                return
            self.nested_left -= len(value)
        try:   # (another thread's append to a deque meanwhile: read it next time)
            items = list(value.values() if isinstance(value, dict) else value)
        except RuntimeError:
            return
        self.containers[id(value)] = value
        for item in items:
            self.in_container.setdefault(id(item), []).append(id(value))
            if nested:
                self._contents(item, depth + 1)
        del item, items

    def _scan_namespace(self, namespace: Dict[str, Any]) -> None:
        name = namespace.get("__name__")
        module = sys.modules.get(name) if isinstance(name, str) else None
        if module is None or getattr(module, "__dict__", None) is not namespace \
                or id(module) in self.modules:
            return
        self.modules.add(id(module))
        for name, value in list(namespace.items()):
            if name.startswith("__") or isinstance(value, (types.ModuleType, type,
                                                           types.FunctionType)):
                continue
            self.by_global.setdefault(id(value), []).append((module, name))
            self._contents(value)
            del value


def walk_referrers(starts: Dict[NodeKey, Any],
                   tensor_key: Callable[[Any], Optional[NodeKey]],
                   *,
                   skip_files: Iterable[str] = (),
                   ignore_ids: Iterable[int] = (),
                   max_depth: int = 8,
                   max_breadth: int = 8,
                   max_nodes: int = 512,
                   use_frames: bool = True,
                   deadline: Optional[float] = None,
                   clock: Callable[[], float] = time.perf_counter) -> WalkResult:
    """Walk up the referrers of ``starts`` (node key -> object).

    ``tensor_key(obj)`` returns the node key of a tracked tensor, so that a
    tensor holding another (``t.extra = u``) appears as itself. Objects whose
    id is in ``ignore_ids`` (the caller's own bookkeeping) are skipped.
    ``deadline`` (a ``clock()`` value, ``time.perf_counter`` unless given):
    no new level starts after it.
    """
    _gc_hold.program_read()   # reading a frame's f_back makes its caller's object
    w = _Walker(tensor_key, frozenset(skip_files), set(ignore_ids),
                max_depth, max_breadth, max_nodes)
    try:
        return w.run(starts, use_frames, deadline, clock)
    finally:
        w.held.clear()


def _looks_like_module_namespace(obj: Any) -> bool:
    """Whether ``obj`` is a dict with the keys every module's __dict__ has
    (a module made by types.ModuleType, one not in sys.modules, as well);
    its str keys are compared by the interpreter, no code of the program's
    runs."""
    return type(obj) is dict and "__name__" in obj and "__spec__" in obj and "__loader__" in obj


def _is_module_namespace(obj: Any) -> bool:
    """Whether ``obj`` is a module's __dict__ (read without running code of
    the program's: a dict's item and sys.modules)."""
    if type(obj) is not dict:
        return False
    name = obj.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    return module is not None and getattr(module, "__dict__", None) is obj


def walk_running_frames(starts: Dict[NodeKey, Any],
                        tensor_key: Callable[[Any], Optional[NodeKey]],
                        *,
                        skip_files: Iterable[str] = (),
                        ignore_ids: Iterable[int] = (),
                        max_nodes: int = 512,
                        items: int = _FRAME_WALK_ITEMS) -> WalkResult:
    """The holders of ``starts`` among the running frames alone, with no
    heap pass: a local of a running function or a global of a module whose
    top level runs (a script's), or an item of a tuple, list, dict or deque
    one of them holds (``items`` of each at most), or of one such container
    in another, _FRAME_WALK_NESTING deep (_Locals). A partial answer: nothing is
    expanded (``WalkResult.expanded`` is empty), so it retracts nothing a
    walk found."""
    _gc_hold.program_read()
    w = _Walker(tensor_key, frozenset(skip_files), set(ignore_ids), 1, 0, max_nodes)
    try:
        return w.run_frames_only(starts, items)
    finally:
        w.held.clear()


_CELL = type((lambda x: lambda: x)(0).__closure__[0])
_NO_DICT = (dict, list, tuple, set, frozenset)   # their instances have no __dict__


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
        self.nstarts = 0   # the starts are in depth too; max_nodes caps the holders
        self.origin: Dict[NodeKey, NodeKey] = {}
        self.level: List[NodeKey] = []
        self.next_level: List[NodeKey] = []
        self.seen: Set[Tuple[NodeKey, NodeKey, str]] = set()
        # Raw edges to fold: instance/module -> its __dict__, function -> its
        # closure tuple, closure tuple -> cell.
        self.dict_owner: Dict[NodeKey, NodeKey] = {}
        self.closure_of: Dict[NodeKey, NodeKey] = {}
        # Frames running now (their locals come from _Locals, as "local 'x'
        # in fn file:line" edges); other frames are holders like any object.
        self.running: Set[int] = set()
        # the ReferrerIndex once a walk is deep (_INDEX_AFTER); False: the heap is too large
        self.index: Any = None
        # A heap pass of one object as the last level made by a pass took:
        # on the walk's clock (read once a level, as before the index: the
        # deadline's), and on the wall clock (what the index's build is
        # measured against: _index_passes)
        self.pass_s = 0.0
        self.pass_wall = 0.0
        self.level_began: Optional[float] = None   # the walk's clock at the last level's start
        self.passes_of_level = 0.0    # that level's passes (0: it was a lookup)
        self.ignore = ignore
        ignore.update(id(x) for x in (self.held, self.res.objects, self.res.names,
                                      self.res.tops, self.res.edges, self.__dict__,
                                      self.level, self.next_level, gc.garbage))

    def node_for(self, obj: Any) -> NodeKey:
        k = self.key_of.get(id(obj))
        if k is None:
            k = self.tensor_key(obj) or ("o", id(obj))
            self.key_of[id(obj)] = k
            if k[0] == "o":
                self.res.names[k] = holder_name(obj)
                self.res.objects[k] = obj
        return k

    def add(self, src_obj: Any, dst: NodeKey, label: str) -> Optional[NodeKey]:
        src = self.node_for(src_obj)
        e = (src, dst, label)
        if e in self.seen or src == dst:
            return None
        known = src in self.depth
        if not known and len(self.depth) - self.nstarts >= self.max_nodes:
            self.res.capped = True
            return None
        self.seen.add(e)
        self.res.edges.append(Edge(src, dst, label))
        if known:
            return src
        # Hops that fold away (to an owner's __dict__, a function's closure
        # tuple, a closure cell) take no depth.
        fold_hop = label in (".__dict__", ".__closure__") or (
            type(src_obj) is tuple and type(self.res.objects.get(dst)) is _CELL)
        d = self.depth[src] = self.depth[dst] + (0 if fold_hop else 1)
        org = self.origin[src] = self.origin[dst]
        if d > self.depth.get(self.res.tops[org], 0):
            self.res.tops[org] = src
        self.held[id(src_obj)] = src_obj
        self.obj_of[src] = id(src_obj)
        if not isinstance(src_obj, (types.ModuleType, type)) and d < self.max_depth:
            self.next_level.append(src)
        return src

    def run_frames_only(self, starts: Dict[NodeKey, Any], items: int) -> WalkResult:
        """walk_running_frames's walk."""
        self.begin(starts)
        locals_ix = _Locals(self.skip, items=items, namespaces=True)
        self.ignore.update((id(locals_ix.by_id), id(locals_ix.containers),
                            id(locals_ix.by_global)))
        self.running = set(locals_ix.frames)
        self.frames_only(locals_ix)
        self.next_level.clear()
        self.fold()
        return self.res

    def run(self, starts: Dict[NodeKey, Any], use_frames: bool,
            deadline: Optional[float],
            clock: Callable[[], float] = time.perf_counter) -> WalkResult:
        self.begin(starts)
        locals_ix = _Locals(self.skip) if use_frames else None
        if locals_ix is not None:
            self.ignore.update((id(locals_ix.by_id), id(locals_ix.containers)))
            self.running = set(locals_ix.frames)
        try:
            self.levels(locals_ix, deadline, clock)
        finally:
            if self.index:   # the heap's list it holds goes now
                self.index.close()
            self.index = None
        self.level.clear()
        self.fold()
        return self.res

    def begin(self, starts: Dict[NodeKey, Any]) -> None:
        """The starts, each a node at depth 0."""
        self.ignore.add(id(starts))
        self.nstarts = len(starts)
        for key, obj in starts.items():
            self.held[id(obj)] = obj
            self.key_of[id(obj)] = key
            self.obj_of[key] = id(obj)
            self.depth[key] = 0
            self.origin[key] = key
            self.res.tops[key] = key
            self.next_level.append(key)

    def levels(self, locals_ix: Optional["_Locals"], deadline: Optional[float],
               clock: Callable[[], float]) -> None:
        while self.next_level:
            now = clock() if deadline is not None else None
            if now is not None and self.level_began is not None and self.passes_of_level:
                self.pass_s = (now - self.level_began) / self.passes_of_level
            self.level_began = now
            # past the deadline a walk stops, but not while it reads the
            # index its time paid for (a lookup a level): the walk that
            # built it at the deadline's edge was cut at its next level,
            # before the frames' locals of the level it had found (actor_
            # critic.py's `act`, a local of main: its closure was the root)
            if now is not None and now > deadline and not (
                    self.index and now - deadline < self.pass_s * _index_passes):
                self.res.cut_off = True
                if locals_ix is not None and not self.res.levels:
                    self.frames_only(locals_ix)
                break
            self.level[:] = self.next_level
            del self.next_level[:]
            if locals_ix is not None:
                for key in self.level:
                    self.frame_edges(locals_ix, key)
            self.expand_level(None if now is None else deadline - now)
            self.res.levels += 1
            if not self.res.capped:   # (once capped, a level's new holders are left out)
                self.res.expanded.update(self.level)

    def frames_only(self, locals_ix: "_Locals") -> None:
        """A walk cut off before its first heap pass: its starts' holders
        among the running frames' locals alone, read without one (a start
        a local holds, or an item of a tuple or list a local holds; in a
        walk of the frames alone, of the containers _Locals read in those)."""
        for key in list(self.next_level):
            self.frame_edges(locals_ix, key)
            self.container_edges(locals_ix, key)
            self.global_edges(locals_ix, key)

    def container_edges(self, locals_ix: "_Locals", key: NodeKey) -> None:
        """The containers _Locals read that hold ``key``'s object, and
        theirs, each with the locals and globals that are it."""
        todo = [key]
        while todo:
            key = todo.pop()
            oid = self.obj_of[key]
            obj = self.held.get(oid)
            for cid in locals_ix.in_container.get(oid, ()):
                if cid in self.ignore:   # the caller's own (its starts)
                    continue
                c = locals_ix.containers[cid]
                for label in _container_labels(c, obj):
                    ckey = self.add(c, key, label)
                    if ckey is not None:
                        self.frame_edges(locals_ix, ckey)
                        self.global_edges(locals_ix, ckey)
                        todo.append(ckey)
                del c
            del obj

    def global_edges(self, locals_ix: "_Locals", key: NodeKey) -> None:
        """``module.name`` for each running module's global that is the
        object (a walk of the running frames alone)."""
        for module, name in locals_ix.by_global.get(self.obj_of[key], ()):
            self.add(module, key, f".{name}")

    def frame_edges(self, locals_ix: "_Locals", key: NodeKey) -> None:
        for fid, label in locals_ix.by_id.get(self.obj_of[key], ()):
            fkey: NodeKey = ("f", fid)
            self.res.names[fkey] = locals_ix.frames[fid]
            e = (fkey, key, label)
            if e not in self.seen:
                self.seen.add(e)
                self.res.edges.append(Edge(fkey, key, label))

    def level_referrers(self, objs: List[Any], left: Optional[float]) -> List[Any]:
        """The referrers of a level: a heap pass, or from the index once the
        walk is past _INDEX_AFTER levels and what is ``left`` of its time
        (None: no deadline) pays half the index at least (_index_passes of
        the passes it made). Half: a walk whose time pays fewer passes than
        the index would make them and be cut short anyway (the first walk of
        an EMA program, its time short of the index by a fraction of a pass,
        made four more passes and was cut); the index then overruns the
        time by half its price at most, as a pass begun in time overruns it
        by a pass, and the credit pays that back before the next walk."""
        global _index_passes, _index_refused
        self.passes_of_level = 0.0
        if self.index is None and self.res.levels >= _INDEX_AFTER and _index_refused:
            _index_refused -= 1
            self.index = False   # the heap was too large a little while ago
        if (self.index is None and _native_index is not None
                and self.res.levels >= _INDEX_AFTER
                and (left is None or left >= self.pass_s * _index_passes / 2)
                and not all(_is_module_namespace(o) for o in objs)):
            began = time.perf_counter()
            try:
                self.index = _native_index(limit=_INDEX_MAX_OBJECTS)
            except (OverflowError, MemoryError):
                self.index = False   # not for this walk: a pass a level
                _index_refused = _INDEX_REFUSED_WALKS
            if self.index:
                if self.pass_wall > 0:   # what it cost in this heap, for the next walk's choice
                    built = time.perf_counter() - began
                    _index_passes = min(max(built / self.pass_wall, 1.0), 20.0)
                self.res.passes += _index_passes
                self.passes_of_level = _index_passes
        if self.index:
            found = self.index.referrers_of(objs)
            if found is not None:
                return found   # (an object it never saw: a pass, below)
        began = time.perf_counter()
        found = referrers_of(objs)
        passes = level_passes(len(objs))
        self.pass_wall = (time.perf_counter() - began) / passes
        self.res.passes += passes
        self.passes_of_level += passes
        return found

    def expand_level(self, left: Optional[float] = None) -> None:
        """The referrers of the whole level at once (a heap pass, or the
        index's lookup), each told how it holds what it holds."""
        objs = [self.held[self.obj_of[k]] for k in self.level if self.obj_of[k] in self.held]
        if not objs:
            return
        want: Dict[int, NodeKey] = {id(o): self.key_of[id(o)] for o in objs}
        self.ignore.add(id(objs))
        self.ignore.add(id(want))
        found = self.level_referrers(objs, left)
        self.ignore.add(id(found))
        n_in: Dict[NodeKey, int] = {}
        try:
            for r in found:
                if id(r) in self.ignore:
                    continue
                if isinstance(r, types.FrameType) and (
                        id(r) in self.running or r.f_code.co_filename in self.skip):
                    continue   # a running frame's locals: frame_edges; ours: never
                for x in gc.get_referents(r):
                    key = want.get(id(x))
                    # A module's namespace is a root: past the breadth still
                    # (a framework's trainer is referred to by dozens of its
                    # own parts, met before the script's globals that hold it)
                    if key is None or (n_in.get(key, 0) >= self.max_breadth
                                       and not _looks_like_module_namespace(r)):
                        continue
                    # A referrer that names no holder (a function's
                    # __globals__: the module is the namespace's holder)
                    # takes none of the breadth: a module's dict is
                    # referred to by each of its functions, and the module
                    # itself must not be crowded out by them.
                    pairs = self.describe(r, x, key)
                    if not pairs:
                        continue
                    n_in[key] = n_in.get(key, 0) + 1
                    for src_obj, label in pairs:
                        self.add(src_obj, key, label)
        finally:
            self.ignore.discard(id(found))
            self.ignore.discard(id(want))
            self.ignore.discard(id(objs))
            del found, objs

    def describe(self, r: Any, obj: Any, key: NodeKey) -> List[Tuple[Any, str]]:
        """(holder, label) pairs for referrer ``r`` of ``obj``."""
        if isinstance(r, types.FrameType):
            return [(r, lb) for lb in _frame_labels(r, obj)] or [(r, "(referent)")]
        if isinstance(r, types.TracebackType):
            return [(r, lb) for lb, v in ((".tb_frame", r.tb_frame), (".tb_next", r.tb_next))
                    if v is obj] or [(r, "(referent)")]
        if isinstance(r, BaseException):
            labels = [lb for lb, v in ((".__traceback__", r.__traceback__),
                                       (".__context__", r.__context__),
                                       (".__cause__", r.__cause__), (".args", r.args))
                      if v is obj]
            if labels:
                return [(r, lb) for lb in labels]
        if isinstance(obj, dict) and type(r) not in _NO_DICT and not isinstance(r, type):
            # An object's own __dict__, also when the object is a container
            # itself (a dict subclass with attributes: transformers'
            # ModelOutput keeps each field as an item and an attribute).
            try:
                if object.__getattribute__(r, "__dict__") is obj:
                    return [(r, ".__dict__")]
            except Exception:
                pass
        if isinstance(r, dict):
            local = thread_local_owner(r, obj)
            if local is not None:   # a thread's attributes: the local's own
                return [(local, ".__dict__")]
            return [(r, lb) for lb in _container_labels(r, obj)]
        if type(r) is _CELL:
            return [(r, "cell_contents")]
        if isinstance(r, (list, tuple, set, frozenset)) or type(r).__name__ == "deque":
            return [(r, lb) for lb in _container_labels(r, obj)]
        if isinstance(r, types.MethodType):
            return [(r, ".__self__" if r.__self__ is obj else ".__func__")]
        if isinstance(r, types.FunctionType):
            if r.__closure__ is obj:
                return [(r, ".__closure__")]
            if r.__defaults__ is obj:
                return [(r, ".__defaults__")]
            if r.__kwdefaults__ is obj:
                return [(r, ".__kwdefaults__")]
            if r.__globals__ is obj:
                return []    # a module's namespace: the module is its holder
            return [(r, "(referent)")]
        if isinstance(obj, dict) and isinstance(r, type):
            return [(r, ".__dict__")]   # a class's namespace
        # a C object's fields (a generator's locals, an lru_cache's, ...),
        # an object's attributes and slots, a tensor's hooks
        return ([(r, lb) for lb in _hidden_field_labels(r, obj)] or
                [(r, lb) for lb in _attr_labels(r, obj)] or
                [(r, lb) for lb in _tensor_attr_labels(r, obj)] or [(r, "(referent)")])

    def fold(self) -> None:
        """Fold ``owner.__dict__['k']`` into ``owner.k``,
        ``fn.__closure__[i].cell_contents`` into ``closure cell 'x' of fn``,
        a frame's or generator's ``local 'x'`` that is a cell, ``.cell_contents``,
        into ``local 'x'``, and an lru_cache's dict into ``lru_cache f's
        cache[key]``."""
        edges = self.res.edges
        ins: Dict[NodeKey, List[Edge]] = {}
        for e in edges:
            ins.setdefault(e.dst, []).append(e)
        drop: Set[int] = set()
        added: List[Edge] = []
        folded_to: Dict[NodeKey, NodeKey] = {}   # folded node -> the node it became
        for i, e in enumerate(edges):
            src_obj = self.res.objects.get(e.src)
            if isinstance(src_obj, dict) and e.label.startswith("["):
                owners = [o for o in ins.get(e.src, ()) if o.label == ".__dict__"]
                caches = [o for o in ins.get(e.src, ()) if o.label == _CACHE]
                if caches and not owners:
                    folded_to[e.src] = caches[0].src
                    for o in caches:
                        added.append(Edge(o.src, e.dst, _CACHE + e.label))
                    drop.add(i)
                elif owners:
                    keys = [k for k, v in list(src_obj.items())
                            if isinstance(k, str) and self.obj_of.get(e.dst) == id(v)]
                    folded_to[e.src] = owners[0].src
                    for o in owners:
                        for k in keys or [e.label]:
                            added.append(Edge(o.src, e.dst, f".{k}" if keys else e.label))
                    drop.add(i)
            elif type(src_obj) is _CELL and e.label == "cell_contents":
                made = False
                for t in ins.get(e.src, ()):
                    # a returned or suspended frame's local that a nested
                    # function reads: its cell is the local's value
                    if t.label.startswith("local '"):
                        added.append(Edge(t.src, e.dst, t.label))
                        folded_to[e.src] = t.src
                        made = True
                        continue
                    for f in ins.get(t.src, ()):
                        fn = self.res.objects.get(f.src)
                        if f.label != ".__closure__" or not isinstance(fn, types.FunctionType):
                            continue
                        try:
                            idx = int(t.label.strip("[]"))
                            var = fn.__code__.co_freevars[idx]
                        except (ValueError, IndexError):
                            continue
                        added.append(Edge(f.src, e.dst,
                                          f"closure cell '{var}' of {fn.__name__}"))
                        folded_to[e.src] = folded_to[t.src] = f.src
                        made = True
                if made:
                    drop.add(i)
        if not drop and not added:
            return
        folded = [e for i, e in enumerate(edges) if i not in drop] + added
        # The hops folded away (owner -> __dict__, fn -> closure -> cell) go
        # too, when nothing else hangs off them.
        used_src = {e.src for e in folded}
        keep = []
        for e in folded:
            if e.label in (".__dict__", ".__closure__", _CACHE) and e.dst not in used_src:
                continue
            keep.append(e)
        used_src = {e.src for e in keep}
        edges[:] = [e for e in keep
                    if not ((type(self.res.objects.get(e.src)) is tuple
                             or e.label.startswith("local '"))
                            and type(self.res.objects.get(e.dst)) is _CELL
                            and e.dst not in used_src)]
        for org, top in list(self.res.tops.items()):
            for _ in range(4):
                top = folded_to.get(top, top)
            self.res.tops[org] = top
