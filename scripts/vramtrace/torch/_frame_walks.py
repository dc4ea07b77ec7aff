"""Walks of the running frames alone: at a mark whose credit pays no holder
walk, what the running frames hold is still named, with no heap pass.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from .._referrers import Edge, NodeKey, WalkResult, walk_running_frames
from ._torch_facts import _SKIP_FILES
from ._walks import _GRAPH_SEARCH_LEAST_S, _cpu_clock

# What the walks' credit may spend on walks of the running frames alone, a
# share of all it earned; and what one such walk is taken to cost until one
# is measured (reading a mark's stale tensors and a few dozen frames' locals).
_FRAMES_ONLY_SHARE = 0.25
_FRAMES_ONLY_S = 0.002


class _FrameWalks:
    """The tracker's walks of the running frames (a mixin of :class:`Tracker`;
    _Walks._walk_stale calls it where it postpones a walk)."""

    def _walk_frames_only(self, threshold: int,
                          starts: Optional[Dict[NodeKey, Any]] = None,
                          kept: Optional[Dict[int, Any]] = None) -> None:
        """At a mark whose credit pays no walk, or a tick whose time pays
        none (a program without marks, or whose marks have gone quiet, on a
        loaded machine): the holders of the stale
        tensors no walk has seen among the running frames alone (a local of
        a running function or a global of a script's top level, or an item
        of a list, tuple, dict or deque one of them holds, and of such a
        container in another: _referrers.walk_running_frames), for the
        price of reading the frames, no heap
        pass. A short program's credit pays a walk or two: its later leaks
        (each evaluation's outputs kept in a list, a local of main()) were
        found with no holder at all. The tensors no frame holds are looked
        for in the autograd graphs, and the graphs' roots in the frames (a
        validation's loss summed with every batch's graph, a local of the
        running loop: _graph_in_frames). What it finds is added to what the
        walks found, as a partial walk's is; it retracts nothing, walks a
        tensor once and counts as no walk: the tensors are walked when the
        credit allows, and a walk from them retracts what no longer holds
        them (a list since moved to another local is named by the first
        until then). It takes at most _FRAMES_ONLY_SHARE of the credit the
        program earned (_earned), so that the walks still get the rest:
        with the whole of it, a loop whose every mark has new stale tensors
        would keep the credit below a walk's for ever."""
        if self._frames_spent + self._frames_cost > _FRAMES_ONLY_SHARE * self._earned:
            return
        began = _cpu_clock()
        read = starts is None
        if starts is None:
            starts, _, kept = self._stale_starts(threshold, False, carried=False)
        fresh = {k: t for k, t in starts.items()
                 if k[1] not in self._walked and k[1] not in self._frames_walked}
        if read:
            starts.clear()
        if fresh or kept:
            res = self._frames_holding(fresh, {id(starts), id(fresh)})
            # what no frame holds may be saved by an autograd graph that a
            # frame's local keeps (a validation loss summed with each
            # batch's graph): the graph's nodes that save them, searched in
            # C++'s books (no heap pass), and the frames that hold the
            # graph's newest tensors
            held = {e.dst for e in res.edges}
            orphans = [k for k in fresh if k not in held]
            extra: Tuple[Edge, ...] = ()
            if orphans or kept:
                extra = self._graph_in_frames(orphans, fresh, kept, res)
            fresh.clear()
            if res.edges or extra:
                self._book.emit(res, "stale", extra, only=set(), again=self._ring_says_again())
            by_tid = self._by_tid
            self._frames_walked = {t for t in self._frames_walked if t in by_tid}
            self._frames_walked.update(k[1] for k in res.tops)
            self._frames_walked.update(e.dst[1] for e in extra if e.dst[0] == "t")
            self.frame_walks += 1
            del res
        cost = _cpu_clock() - began
        self._frames_cost = cost
        self._frames_spent += cost

    def _frames_holding(self, starts: Dict[NodeKey, Any], ours: Set[int]) -> WalkResult:
        """What the running frames hold of ``starts`` (walk_running_frames);
        ``ours``: the ids of the tracker's own books holding them."""
        return walk_running_frames(starts, self._tensor_key, skip_files=_SKIP_FILES,
                                   ignore_ids=self._ignore_ids() | ours,
                                   max_nodes=self.max_nodes)

    def _graph_in_frames(self, orphans: List[NodeKey], starts: Dict[NodeKey, Any],
                         kept: Optional[Dict[int, Any]], res: WalkResult) -> Tuple[Edge, ...]:
        """The autograd edges to ``orphans`` and to the storages ``kept``
        by C++ alone (_Walks._autograd_edges, for
        _GRAPH_SEARCH_LEAST_S of CPU at most), their nodes named in ``res``,
        and added to ``res`` what the running frames hold of the graphs'
        roots (_Walks._graph_roots)."""
        grad_edges, grad_nodes = self._autograd_edges(
            orphans, starts, _cpu_clock() + _GRAPH_SEARCH_LEAST_S, kept, _cpu_clock)
        res.add_nodes(grad_nodes)
        del grad_nodes
        extra = tuple(grad_edges)
        roots = self._graph_roots(extra, res.edges, starts)
        if roots:
            more = self._frames_holding(roots, {id(starts), id(res.objects), id(roots)})
            res.add_found(more)
            roots.clear()
            del more
        return extra
