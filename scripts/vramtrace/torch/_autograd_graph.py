"""The autograd graph as the holder walks read it: the hooks a node keeps
in C++, its saved tensors and the values of its saved attributes, a bounded
walk over ``grad_fn`` and ``next_functions``, and the chains through it
that a walk asserts (_walks.py asks; nothing here records).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from .._referrers import Edge, NodeKey

import torch as _torch


# The edges of autograd chains a walk asserts whole, at most: beyond, one
# shortest chain to each target (_chains_to). A list keeping each batch's
# output keeps every spent graph; pytorch/examples' word_language_model's 276
# each reach the replaced model's parameters (AccumulateGrad), and asserting
# every node of them (107,000 holders, 250,000 references) at the exit
# snapshot overwrote most of the ring's history of the program.
_WHOLE_CHAINS_UP_TO = 4096


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
# Walks over autograd graphs
# --------------------------------------------------------------------------


class _GradGraphWalk:
    """A bounded walk over autograd graphs (``grad_fn`` and its
    ``next_functions``), shared by the searches for edges that live in C++.

    Every node reached is kept in ``nodes`` with the edge that reached it in
    ``edges``; each node is handed to the caller once, across all the roots
    walked. The whole walk takes ``budget`` steps, and more while
    ``clock`` (the holder walk's: the process's CPU clock, or a tick's)
    reads before ``deadline`` (a snapshot's is seconds, so that a graph kept
    across many steps, a tape, is walked whole where it matters)."""

    def __init__(self, budget: int = 2048, deadline: Optional[float] = None,
                 clock: Optional[Callable[[], float]] = None) -> None:
        self.nodes: Dict[NodeKey, Any] = {}
        self.edges: List[Edge] = []
        self.seen: Set[int] = set()
        self.budget = budget
        self.deadline = deadline
        self.clock = clock or time.process_time   # the holder walk's budget's

    def _more(self) -> bool:
        """Budget left, or granted again while the deadline allows."""
        if self.budget > 0:
            return True
        if self.deadline is not None and self.clock() < self.deadline:
            self.budget = 1024
            return True
        return False

    def new_nodes(self, fn: Any, root: NodeKey) -> Iterator[Tuple[Any, NodeKey]]:
        """Walks from ``root``'s grad_fn ``fn``: yields each node not seen
        before, then follows its next_functions."""
        stack: List[Tuple[Any, NodeKey, str]] = [(fn, root, "grad_fn")]
        del fn
        while stack and self._more():
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


def _newest_first(by_tid: Dict[int, Any]) -> List[Any]:
    """The tracked tensors' records, the newest first. A graph's top tensor
    (a loss, a running total) is made after every tensor inside it: walked
    from there first, each graph is entered once at its top, and a bounded
    walk spends its steps on the graphs that something outside keeps, not on
    the inner tensors' own subgraphs (whose chains then end in themselves)."""
    recs = list(by_tid.values())
    recs.reverse()
    return recs


_SAVED_ATTRS: Dict[type, Tuple[str, ...]] = {}


def _saved_attrs(node_type: type) -> Tuple[str, ...]:
    """The ``_saved_*`` attributes of an autograd node type that may hold
    tensors (not its sizes and strides), listed once per type: ``dir`` of a
    node costs more than the rest of its visit."""
    attrs = _SAVED_ATTRS.get(node_type)
    if attrs is None:
        attrs = tuple(a for a in dir(node_type) if a.startswith("_saved_")
                      and not a.endswith(("sizes", "strides")))
        _SAVED_ATTRS[node_type] = attrs
    return attrs


# Said after the label of a saved tensor that the program's pack hook
# returned (_saved_data): the checker's report reads it (check_report.c,
# PACKED_MARK) to say why a cycle through it is never freed.
_PACKED_MARK = " (as packed by saved_tensors_hooks)"


def _function_saved(node: Any) -> List[Tuple[Any, bool]]:
    """The tensors an autograd.Function's node saved (``_raw_saved_tensors``),
    read without calling a hook (_saved_data), each with whether a pack hook
    made it; [] for other nodes."""
    try:
        raws = node._raw_saved_tensors
    except Exception:
        return []
    out: List[Tuple[Any, bool]] = []
    for r in raws if isinstance(raws, (list, tuple)) else ():
        try:
            packed = r.unpack_hook is not None
        except Exception:
            continue
        out.extend((d, packed) for d in _saved_data(r))
    return out


def _saved_data(raw: Any) -> List[Any]:
    """The tensors SavedTensor ``raw`` keeps, read without unpacking: its
    ``data``, which is the saved tensor where no saved_tensors_hooks were
    set and what the program's pack hook returned where they were (a tensor,
    or tensors in a tuple or list: save_on_cpu's (device, copy)); reading it
    calls no hook. [] once backward released it. A pack hook that returns
    the tensor itself keeps it from C++ (pytorch/pytorch PR 189025's caveat):
    a saved output then keeps its own grad_fn, a cycle through C++ that
    gc.collect() never breaks, and its graph's saved inputs with it."""
    try:
        data = raw.data
    except Exception:
        return []
    if isinstance(data, _torch.Tensor):
        return [data]
    if isinstance(data, (tuple, list)) and len(data) <= 8:
        return [d for d in data if isinstance(d, _torch.Tensor)]
    return []


def _saved_values(node: Any, attr: str) -> Tuple[Sequence[Any], bool]:
    """What ``node.<attr>`` (a ``_saved_*`` attribute) keeps, told by its
    ``_raw`` twin (SavedTensor objects), and whether the program's pack hook
    made it. Never by calling the program's saved-tensor unpack hook
    (activation checkpointing's recomputes the forward: memory, time, the
    program's own code run again; an offloading hook copies back to the
    device): where saved_tensors_hooks packed it, what the pack hook
    returned (_saved_data), read as packed. Nothing where every tensor it
    saved was released (a graph whose backward ran: its ``data`` is None,
    and reading the attribute raises, which cost the snapshot of
    pytorch/examples' word_language_model, a list keeping each batch's LSTM
    output and so its spent graph, 5 s of exceptions), nor where it cannot
    be asked. The attribute itself where it is no saved tensor (sizes,
    scalars)."""
    try:
        raw = getattr(node, "_raw" + attr)
    except AttributeError:
        return _attr_values(node, attr), False   # nothing to unpack
    except Exception:
        return (), False
    packed: Optional[List[Any]] = None
    alive = False
    for r in raw if isinstance(raw, (list, tuple)) else (raw,):
        if r is None:
            continue
        try:
            if r.unpack_hook is not None:
                packed = (packed or []) + _saved_data(r)
            else:
                alive = alive or r.data is not None
        except Exception:
            return (), False
    if packed is not None:
        return packed, True
    return (_attr_values(node, attr) if alive else ()), False


def _attr_values(node: Any, attr: str) -> Sequence[Any]:
    """``node.<attr>`` as a sequence; () where reading it raises."""
    try:
        val = getattr(node, attr)
    except Exception:
        return ()
    return val if isinstance(val, (list, tuple)) else (val,)


def _chains_to(useful: Set[NodeKey], edges: List[Edge], nodes: Dict[NodeKey, Any],
               whole_up_to: Optional[int] = None
               ) -> Tuple[List[Edge], Dict[NodeKey, Any]]:
    """The edges and nodes on chains that end in ``useful``: what reaches
    it, found backwards along each edge once. Beyond ``whole_up_to`` edges
    (_WHOLE_CHAINS_UP_TO), only one shortest chain to each node of
    ``useful`` (_shortest_chains)."""
    if whole_up_to is None:
        whole_up_to = _WHOLE_CHAINS_UP_TO
    targets = set(useful)
    into: Dict[NodeKey, List[NodeKey]] = {}
    for e in edges:
        into.setdefault(e.dst, []).append(e.src)
    todo = list(useful)
    while todo:
        for src in into.get(todo.pop(), ()):
            if src not in useful:
                useful.add(src)
                todo.append(src)
    kept = [e for e in edges if e.dst in useful and e.src in useful]
    if len(kept) > whole_up_to:
        kept = _shortest_chains(targets, kept)
        useful = {e.src for e in kept} | {e.dst for e in kept}
    return kept, {k: v for k, v in nodes.items() if k in useful}


def _shortest_chains(targets: Set[NodeKey], edges: List[Edge]) -> List[Edge]:
    """Of ``edges`` (all on chains to ``targets``), one chain to each
    target: the shortest from the newest tensor that reaches it. Each
    tensor nothing among them reaches, the newest first, claims what it
    reaches breadth first and no other tensor has claimed. The newest is a
    graph's top (a loss, the hidden state carried across batches) and what
    holds it is what keeps the graph; a nearer tensor inside the graph may be
    held by the graph alone (from C++), and the chain would then stop at a
    node when it dies. Then the tensors that only a cycle reaches (a tensor
    its own grad_fn saved, as ReLU's result): such a tensor's chain starts
    at itself."""
    out: Dict[NodeKey, List[Edge]] = {}
    into: Set[NodeKey] = set()
    for e in edges:
        out.setdefault(e.src, []).append(e)
        into.add(e.dst)
    parent: Dict[NodeKey, Optional[Edge]] = {}

    def claim(source: NodeKey) -> None:
        parent[source] = None
        level = [source]
        while level:
            nxt = []
            for k in level:
                for e in out.get(k, ()):
                    if e.dst not in parent:
                        parent[e.dst] = e
                        nxt.append(e.dst)
            level = nxt

    def newest_first(keys: Iterable[NodeKey]) -> List[NodeKey]:
        return sorted(keys, key=lambda k: (k[0] != "t", -k[1] if k[0] == "t" else 0))
    for k in newest_first(k for k in out if k not in into):
        if k not in parent:
            claim(k)
    for k in newest_first(k for k in out.keys() | targets if k[0] == "t"):
        if k not in parent:
            claim(k)
    chosen: Dict[Tuple[NodeKey, NodeKey, str], Edge] = {}
    on_chain: Set[NodeKey] = set()
    for k in targets:
        while k in parent and k not in on_chain:
            on_chain.add(k)
            e = parent[k]
            if e is None:
                break
            chosen.setdefault((e.src, e.dst, e.label), e)
            k = e.src
    return list(chosen.values())
