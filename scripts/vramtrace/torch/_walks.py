"""Holder walks: from the storages gone stale to what still holds them,
through referrers, autograd hooks and graph edges (the graph as
_autograd_graph.py reads it).
"""

from __future__ import annotations

import itertools
import re
import sys
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .._lib import TENSOR_SAVED_ONLY
from .._referrers import (Edge, NodeKey, WalkResult, instances_of, level_passes,
                          walk_referrers)
from ._autograd_graph import (_PACKED_MARK, _GradGraphWalk, _chains_to, _function_saved,
                              _newest_first, _node_hook_dicts, _saved_attrs, _saved_values)
from ._naming import _site_name
from ._records import _StorageRec
from ._torch_facts import _SKIP_FILES, _storage_info

import torch as _torch


# A walk that found nothing (emit only reads it): made once, not at every
# mark of a clean loop.
_NOTHING_FOUND = WalkResult()

# "h = f(x) (train.py:40, aten.relu out[0])" -> "h = f(x) (train.py:40)": a line
# (what follows the line may hold parentheses: "tensor (4, 64) float32, ...").
_OP_PART = re.compile(r"(:\d+), (?:[^()]|\([^()]*\))*\)$")
# A snapshot's walk also starts from the storages in use of a line that made
# at least _GROWING_LINE of them (the oldest _GROWING_WALKED of each, at most
# about _GROWING_WALKED_ALL in all): see Tracker._growing_starts.
_FIRST_PASS_S = 0.02           # a heap pass's cost assumed until one is measured
_MAX_PARTIAL_STARTS = 32       # starts of a partial walk; the rest wait for the next
# The least walk, in heap passes: a level of one start (never the compiled
# pass's: _referrers._NATIVE_FROM) and one more, the containers, then what
# owns them. A constant, read at every mark (a call a mark costs it ~1 us).
_LEAST_WALK_PASSES = 1 + level_passes(1)
_GROWING_LINE = 3
_GROWING_WALKED = 4
_GROWING_WALKED_ALL = 128
# Walks in a row at whose marks what the loop carries from step to step and
# still uses had grown (stale_storages' `carried`) before a walk starts from
# the lines that made many of it too (_growing_starts, as a snapshot does).
_CARRIED_GROWING = 3
# Storages rebuilt larger from their own line's value (StorageRec.regrown)
# walked at a mark, at most (the newest): a decoder's key/value caches grown
# by torch.cat are one such storage a layer.
_REGROWN_WALKED = 16
# The tensors recorded right after an orphan whose grad_fn is looked at first
# (Tracker._autograd_edges): the outputs of the op that saved it; at most
# _NEAR_VISITS such nodes a walk, besides the graph walk's own budget (a
# snapshot's walk of thousands of stale tensors spent that budget here, and
# its walk from the newest tensors no longer reached the graph's holder).
_NEAR_TENSORS = 8
_NEAR_VISITS = 256
# The tensors at the top of a walk's autograd chains walked for their own
# holders, at most (the newest first): a graph kept across batches has its
# every saved intermediate as such a tensor (each has a Python object, held
# by the graph alone), and one heap pass looks for the holders of them all.
_GRAPH_ROOTS = 1024
# What a walk's search of the autograd graphs for the nodes that save its
# stale tensors may spend at least (of its clock), whatever the walk's heap
# passes left of its budget, and what a walk of the running frames alone
# spends on it at most (_FrameWalks._graph_in_frames): the graph's nodes are
# read from C++ (no heap pass), and a tick's walk on a loaded machine, its
# budget spent on heap passes, named none of a validation's kept graph.
_GRAPH_SEARCH_LEAST_S = 0.02


_cpu_clock = time.process_time   # the walk's budget: the process's CPU time


def tick_clock() -> Callable[[], float]:
    """The clock of a tick's work, which must end in time as well as in CPU
    (a program without marks is judged by time: what a tick pauses the
    program for makes the temporaries it replaces at its next op look
    held): 0 now, then the seconds since, of CPU or of the wall clock,
    whichever ran more. (On a loaded machine, 0.2 s of CPU took 0.5 s of
    the program's time.)"""
    cpu0, wall0 = _cpu_clock(), time.perf_counter()
    return lambda: max(_cpu_clock() - cpu0, time.perf_counter() - wall0)


class _Walks:
    """The tracker's holder walks (a mixin of :class:`Tracker`)."""

    def _tensor_key(self, obj: Any) -> Optional[NodeKey]:
        if isinstance(obj, _torch.Tensor):
            rec = self._by_obj.get(id(obj))
            if rec is not None:
                return ("t", self._fast.record(rec))
        return None

    def _ignore_ids(self) -> Set[int]:
        return {id(self), id(self._books), id(self._by_obj), id(self._by_tid), id(self._storages),
                id(self._gc_dead), id(self._pending), id(self.__dict__)}

    def _walk(self, starts: Dict[NodeKey, Any], extra: Set[int],
              deadline: Optional[float] = None,
              clock: Callable[[], float] = _cpu_clock) -> WalkResult:
        return walk_referrers(starts, self._tensor_key, skip_files=_SKIP_FILES,
                              ignore_ids=self._ignore_ids() | extra,
                              max_depth=self.max_depth, max_breadth=self.max_breadth,
                              max_nodes=self.max_nodes, deadline=deadline, clock=clock)

    def _stale_starts(self, threshold: int, final: bool, carried: bool = True
                      ) -> Tuple[Dict[NodeKey, Any], Dict[int, int], Dict[int, _StorageRec]]:
        """The tensors a mark walks from, with their reference counts, and
        the stale storages kept by C++ alone, by key.

        A storage not used since the previous mark is stale; a resting one
        (a batch reused every k steps: stale_storages in
        native/trackfast/storages.c says when) is left out of the walk. At a
        snapshot every stale one counts.
        A stale storage that outlived every tensor the program had on it
        (each one's death was seen, the storage's was not) is kept by C++,
        most often an autograd node's saved tensor, whose Python object is
        made anew at each unpacking (ReLU(inplace)'s saved output of a graph
        kept alive); so is one whose only tensor stands for such a saved one
        (_saved_tensor_of), to be found again.

        In a program that uses a device, a mark or tick leaves the stale
        host storages to the snapshot's walk: `check` judges host memory
        there only when asked (--host), and a program's results kept on the
        host (``ids.cpu()`` of each request) would take every tick's walk
        (hf_decode.py: each tick's 0.16 s went to its one or two new kept
        id tensors).

        With ``carried`` (a heap walk's starts, not the running frames'
        alone), the lines of a loop that carries more each step are walked
        from too (_carried_grows)."""
        starts: Dict[NodeKey, Any] = {}
        counts: Dict[int, int] = {}
        kept: Dict[int, _StorageRec] = {}
        saved_only = self._saved_only
        getrefcount = sys.getrefcount
        # every storage's epochs brought up to date in C, the stale ones
        # returned, those resting and the host ones left out there
        # (stale_storages, native/trackfast/storages.c)
        looked, resting, host, regrown, carried_now = self._fast.stale_storages(
            threshold, final, self._fast.device_seen and not final)
        self.host_deferred += host
        self.resting_skipped += len(resting)
        for srec in itertools.chain(resting, looked):   # kept by C++ alone, resting or not
            tids = srec.tids
            if srec.nbytes and (not tids or (len(tids) == 1 and
                                             saved_only.get(srec.skey) in tids)):
                kept[srec.skey] = srec
        # With the stale ones, a line's value rebuilt larger from itself each
        # step (`kept = torch.cat([kept, x])`): used every step, never stale,
        # its newest few are walked too, or a growth finding on it would name
        # no holder (the check asks at the last step end judged, when its
        # storage was the step's newest, made by then).
        for srec in itertools.chain(looked, regrown[-_REGROWN_WALKED:]):
            for rec in srec.tids:
                t = rec.ref() if rec.ref is not None and rec.tid else None
                if t is not None:
                    starts[("t", rec.tid)] = t
                    counts[rec.tid] = getrefcount(t)   # same spot every mark
                del t
        if final:
            self._growing_starts(threshold, starts, counts)
        elif carried and self._carried_grows(carried_now):
            # walked again at each such mark until a walk from them is not
            # cut short (settled): used every step, they are never stale, so
            # no later walk retries them, and a chain through a model's
            # modules to a hook's defaults is deeper than a mark's first walk
            for tid in self._growing_starts(threshold, starts, counts):
                if tid not in self._settled:
                    self._walked.discard(tid)
        return starts, counts, kept

    def _carried_grows(self, carried: int) -> bool:
        """Whether what the loop carries from step to step and still uses
        (``carried`` storages now) grew before each of the last few walks
        (_CARRIED_GROWING; a mark that postpones its walk reads no count):
        then this walk starts from the lines that made many of it too, as a
        snapshot's does, and the next such needs as many again. A loop that
        keeps more of what it uses each step (hooks that pile up on a
        module, each bound to its own step's batch) is a growth finding
        whose storages no stale walk reaches, and whose holder a snapshot
        after the loop no longer finds (the model was a local of the
        function that returned). What it costs is the walks' (their credit),
        and a pass over the books' storages every few walks."""
        grew = carried > self._carried
        self._carried = carried
        self._carried_grew = self._carried_grew + 1 if grew else 0
        if self._carried_grew < _CARRIED_GROWING:
            return False
        self._carried_grew = 0
        return True

    def _adopt_unseen(self, search: Set[int], kept: Dict[int, _StorageRec],
                      starts: Dict[NodeKey, Any], counts: Dict[int, int]) -> None:
        """The Python tensors on storages in ``search`` (stale, kept
        without a tensor the books know, none searched before but at a
        snapshot), tracked and walked from. A compiled graph's output is
        made by its generated code (the buffer by empty_strided_cuda, the
        tensor returned by reinterpret_tensor), which no op shows: the books
        saw the buffer's memory as an op's `out=` argument, whose tensor
        died, and what the program keeps is another tensor on it (nanoGPT's
        compiled model's logits kept in a list: "no holder recorded"). One
        pass over the heap's tensors finds them; each is recorded as found
        (its making no use of the storage, its owner unchanged), named and
        made at the line of the first op that showed a tensor on its memory
        (the compiled function's), and its storage leaves ``kept`` (the
        autograd search is for saved ones)."""
        if len(self._kept_searched) >= 1 << 16:   # keys of storages long gone
            self._kept_searched.clear()
        self._kept_searched |= search
        by_obj = self._by_obj
        found = []
        made = {k: kept[k].made_stack for k in search if k in kept}
        for t in instances_of(_torch.Tensor):
            if id(t) in by_obj:
                continue
            info = _storage_info(t)
            if info is None or info[2] not in search:
                continue
            # named by the program's line that allocated its memory (the
            # compiled function's caller's: _made_site), else by the line
            # of the first op that showed a tensor on it (inductor's
            # generated code: the compiled function's), and its making
            # recorded there
            stack = made.get(info[2], 0)
            what = (f"tensor {tuple(t.shape)} {str(t.dtype).replace('torch.', '')}, "
                    "made where no op showed it")
            site = self._made_site(info[0])
            name = (_site_name(site[0], site[1], what) if site is not None
                    else self._named_at(stack, what))
            rec = self._fast.track(t, name, stack, TENSOR_SAVED_ONLY)
            if rec is not None and rec.tid:
                kept.pop(info[2], None)
                found.append((rec.tid, t))
        t = None   # the heap's tensors let go before the counts are read
        self.tensors_found += len(found)
        for tid, t in found:
            starts[("t", tid)] = t
            counts[tid] = sys.getrefcount(t) - 1   # as _stale_starts reads it, less `found`
        del found, t

    def _growing_starts(self, threshold: int, starts: Dict[NodeKey, Any],
                        counts: Dict[int, int]) -> List[int]:
        """At a snapshot (and at a mark whose loop carries more each step:
        _carried_grows), also the tensors of storages in use that one line
        made many of: what grows step over step is used every step (hooks
        that pile up on a layer, each bound to its own step's tensor), so no
        stale walk reaches it, and the checker's growth rule would name the
        line but not what keeps its storages. The oldest few of each such
        line (those a growth finding shows), a bounded number in all, added
        to ``starts``; returns the ids of the tensors added."""
        by_line: Dict[str, List[_StorageRec]] = {}
        for srec in self._storages.values():     # oldest first: dicts keep order
            if srec.last_epoch < threshold:
                continue                          # stale: walked already
            for rec in srec.tids:
                if rec.base == 0 and rec.tid:
                    by_line.setdefault(_OP_PART.sub(r"\1)", rec.name), []).append(srec)
                    break
        added: List[int] = []
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
                        added.append(rec.tid)
                    del t
            if len(added) >= _GROWING_WALKED_ALL:
                break
        return added

    def _walk_stale(self, threshold: int, final: bool = False, until: Optional[float] = None,
                    clock: Callable[[], float] = _cpu_clock) -> None:
        """Walk the holders of the stale tensors from the walks' credit
        (``final``: a snapshot's, with snapshot_walk_s at least), read on
        ``clock``; ``until``, when given, is the reading of ``clock`` by
        which the walk ends whatever its credit (a tick's: tick_clock() reads
        0 at the tick's start)."""
        budgeted = not final and until is None and self.walk_fraction is not None
        forced = budgeted and self._half_ring_since(self._walked_at) is not None
        if budgeted and not forced and self._credit < self._pass_cost * self._deepened(
                _LEAST_WALK_PASSES, self._credit_ceiling()):
            # No walk of any start fits the credit (the least walk's cost:
            # _LEAST_WALK_PASSES heap passes): postponed before the
            # stale set is read, which costs a pass over every storage and
            # grows with what the program keeps (a loop that keeps a tensor
            # a step paid 1.7 ms a mark at 1,000 kept, never walking, and
            # so never earned the credit back).
            self.walks_postponed += 1
            self._marks_since_walk += 1
            self._walk_frames_only(threshold)
            return
        starts, counts, kept = self._stale_starts(threshold, final)
        # stale storages kept without a known tensor that no search looked
        # at: the tensors on them that no op showed are looked for first
        search = {k for k in kept if final or k not in self._kept_searched}
        if not starts and not search:
            self._book.emit(_NOTHING_FOUND, "stale")   # retracts all it asserted
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
        # a walk the ring forces is complete: it declares every holder again
        full = final or forced or (
            not fresh and not changed and self._marks_since_walk >= self._backoff
            and not all(settled.get(t) == n for t, n in counts.items()))
        if not final and not fresh and not changed and not search:
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
        began, began_cpu = clock(), _cpu_clock()
        if self.walk_fraction is None:      # no time budget
            allowance = float("inf")
        else:
            allowance = max(self._credit, self.snapshot_walk_s) if final else self._credit
        if until is not None:
            allowance = min(allowance, until - began)
        # A walk at a mark runs when its budget fits its first level (a heap
        # pass, longer with more starts) and one more: the first finds the
        # containers, the second what owns them. A snapshot's walk, the
        # last chance, runs its first level whatever its budget.
        # (A level of many objects costs more than one heap pass:
        # _referrers.level_passes.)
        # After a walk at a mark that its budget cut short, the next waits
        # until the credit pays for as many levels as that one made and two
        # more (a deeper walk, less often: the same share of the program's
        # time), the credit's ceiling at most. Else every walk runs as soon
        # as its least fits, and a chain deeper than a step's credit is never
        # found whole: minGPT-ddp's kept weights, held by `self` of its
        # train() through Trainer.kept_states, list and dict, a pass of 22 ms
        # each, walked 2-3 levels at each of four marks (60-90 ms of credit),
        # then only at exit, after train() had returned. A walk the ring
        # forces too (its second was one there): it overdraws the credit,
        # the ceiling at most, and the next walks wait until it is paid.
        need = 0.0 if final else self._pass_cost * self._deepened(
            1 + level_passes(len(starts)) + bool(search),
            self._credit_ceiling() if until is None else until - began)
        if forced:   # paid from the credit all the same: the next walks wait
            allowance = max(allowance, need)
        if allowance <= 0 or allowance < need:
            self.walks_postponed += 1
            # (at a mark or a tick: a snapshot's walk is never postponed)
            self._walk_frames_only(threshold, starts, kept)
            starts.clear()
            return
        if search:
            self._adopt_unseen(search, kept, starts, counts)
        res = self._walk(starts, set(), None if allowance == float("inf") else began + allowance,
                         clock)
        passes = res.passes
        if passes:
            self._pass_cost = (_cpu_clock() - began_cpu) / passes
        if not final:
            self._deepen = passes + 2 if res.cut_off else 0.0
        self.walks += 1
        self.forced_walks += forced
        got = self._trace_window()
        if got is not None:
            self._walked_at = got[0]
        self._backoff = 1 if fresh else min(2 * self._backoff, 64)
        self._marks_since_walk = 0
        cut = res.cut_off or res.capped
        if cut:
            self.walk_cutoffs += 1
            # A mark's walk cut short is routine (what it did not reach is
            # looked for at later marks); the snapshot's is the last chance,
            # and its findings may then lack part of their chains: said once.
            if final and not self._said_final_cutoff:
                self._said_final_cutoff = True
                why, knob = ((f"ran out of its time budget ({allowance * 1e3:.0f} ms) after "
                              f"{res.levels} levels", "snapshot_walk_s sets the budget")
                             if res.cut_off else
                             (f"stopped at its bound of {self.max_nodes} holders",
                              "track(max_nodes=...) sets the bound"))
                self._warn(f"vramtrace.torch: the holder walk at the snapshot {why}; findings "
                           f"may show part of their holder chains or none ({knob})", 4)
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
        if not cut:
            self._settled.update(counts)
        else:
            for t in counts:
                self._settled.pop(t, None)
        # A view holds its base (view._base, from C++: invisible to gc).
        views = [Edge(k, b, "._base") for k in starts
                 for b in (self._base_held(k[1]),) if b is not None and b in starts]
        res.edges.extend(views)
        edges = list(res.edges)
        held = {e.dst for e in edges}
        orphans = [k for k in starts if k not in held]
        extra: Tuple[Edge, ...] = ()
        if orphans or kept:
            # (_GRAPH_SEARCH_LEAST_S at least: what no heap walk names,
            # a graph's saved tensors, is named from the graph, and its
            # roots from the frames, whatever the walk left of the budget)
            grad_edges, grad_nodes = self._autograd_edges(
                orphans, starts, max(began + allowance, clock() + _GRAPH_SEARCH_LEAST_S),
                kept, clock)
            res.add_nodes(grad_nodes)
            extra = tuple(grad_edges)
            del grad_nodes
        hook_edges, hook_nodes = self._hook_edges(res, held, began + allowance, clock)
        if hook_edges:
            res.add_nodes(hook_nodes)
            extra += tuple(hook_edges)
        del hook_nodes
        roots = self._graph_roots(extra, res.edges, starts)
        if roots:
            # A graph's chain starts at a tensor whose grad_fn reaches the
            # node that saved a stale tensor; the edge from a tensor to its
            # grad_fn lives in C++, so the walk from the stale tensors never
            # met what holds that one: walked for its holders too, within
            # the same allowance. A graph kept across batches inside a
            # training function is held by its last output, a local of the
            # function (word_language_model's `hidden`, never detached).
            # The first walk's own books (its starts, what it found) are
            # not the program's holders.
            ours = {id(starts), id(res.objects), id(res.names), id(res.tops), id(res.edges)}
            more = self._walk(roots, ours, None if allowance == float("inf")
                              else began + allowance, clock)
            res.add_found(more)
            res.levels += more.levels
            res.passes += more.passes
            res.expanded |= more.expanded
            # (a walk its deadline cuts before its first heap pass still
            # names what the running frames hold of the roots: the walker's
            # frames_only, _referrers)
            cut = cut or more.cut_off or more.capped
            del more
        # What a walk retracts: a complete walk that ran to its end, every
        # reference it no longer found; else those to the tensors whose
        # referrers it enumerated. A walk cut short found nothing of what
        # it did not reach (actor_critic.py's list, a local of main and a
        # closure cell of its act(): a walk cut after the list's level
        # retracted main's local holding act(), and act() became a root).
        only = None if full and not cut else {k[1] for k in res.expanded if k[0] == "t"}
        roots.clear()
        starts.clear()
        self._book.emit(res, "stale", extra, only=only, again=final or self._ring_says_again())
        del res
        if not full:
            self.partial_walks += 1

    def _deepened(self, least: float, most_s: float) -> float:
        """The heap passes a walk at a mark waits for: ``least``, or more
        after a walk its budget cut short (_deepen), as many as ``most_s``
        seconds of passes at most."""
        if self._pass_cost <= 0:
            return least   # (passes measured as free: any number fits)
        return max(least, min(self._deepen, most_s / self._pass_cost))

    def _graph_roots(self, graph: Tuple[Edge, ...], walked: List[Edge],
                     starts: Dict[NodeKey, Any]) -> Dict[NodeKey, Any]:
        """The live tensors the chains of ``graph`` (autograd edges)
        start from that nothing the walk found holds and that it did not
        start from, the newest first, _GRAPH_ROOTS at most."""
        held = {e.dst for e in graph} | {e.dst for e in walked}
        tids = sorted({e.src[1] for e in graph
                       if e.src[0] == "t" and e.src not in held and e.src not in starts},
                      reverse=True)
        roots: Dict[NodeKey, Any] = {}
        for tid in tids:
            rec = self._by_tid.get(tid)
            t = rec.ref() if rec is not None and rec.ref is not None else None
            if t is not None:
                roots[("t", tid)] = t
                if len(roots) >= _GRAPH_ROOTS:
                    break
            del t
        return roots

    def _base_held(self, tid: int) -> Optional[NodeKey]:
        """The tensor a recorded view ``tid`` holds as its ``_base``: its
        ``_base`` itself where that is a tracked tensor, else the base its
        record names (the storage's first tensor). They differ for a view
        of a tensor that shares a storage without being a view: in
        ``out.detach()[:, 0]`` the select's ``_base`` is the detached
        tensor, which lives on through it (a walk would otherwise show it
        held by nothing), not ``out``. None: not a view."""
        rec = self._by_tid.get(tid)
        if rec is None or not rec.base:
            return None
        brec = self._base_rec(rec)
        return ("t", brec.tid if brec is not None else rec.base)

    def _trace_window(self) -> Optional[Tuple[int, int]]:
        """(events recorded, the ring's room) of the library; None when it
        cannot say or records nothing."""
        window = self._read_window   # _ring_calls: in C where it can be
        got = window() if window is not None else None
        return got if got and got[1] else None

    def _half_ring_since(self, at: int,
                         got: Optional[Tuple[int, int]] = None) -> Optional[int]:
        """The events recorded now, once the program has recorded half a
        ring since ``at`` (a count of them); else None. ``got``: the
        window as _trace_window() just read it.

        Two things wait on it. A walk runs whatever its credit when none ran
        for half a ring (``_walked_at``): a loop whose marks' other work
        outgrows the budget would never walk before the exit snapshot, and a
        signal's or an OOM's snapshot would hold tensors and no holders; one
        walk per half ring (hundreds of steps of the default ring) costs the
        program next to nothing, and is paid from the credit as any walk. And
        a walk declares again all it finds, its references and its holders'
        names, when none did for half a ring (``_declared_at``): a run longer
        than the ring overwrites the walk that first declared a holder, and
        a snapshot without a walk of its own would show chains from nameless
        holders (the exit snapshot walks for itself); and the tensors are
        declared again (_Marks._declare_tensors_again)."""
        if got is None:
            got = self._trace_window()
        return got[0] if got is not None and got[0] - at >= got[1] // 2 else None

    def _ring_says_again(self) -> bool:
        """Whether this walk declares again all it finds (_half_ring_since)."""
        now = self._half_ring_since(self._declared_at)
        if now is None:
            return False
        self._declared_at = now
        return True

    def _hook_edges(self, res: WalkResult, held: Set[NodeKey], deadline: float,
                    clock: Callable[[], float] = _cpu_clock
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
        graph = _GradGraphWalk(deadline=deadline, clock=clock)
        for rec in _newest_first(self._by_tid):
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

    def _saved_tensor_of(self, srec: _StorageRec, node: Any, attr: str, tname: str) -> NodeKey:
        """The tensor that stands for storage ``srec``'s saved tensor in
        ``node`` (a storage _stale_starts found kept by C++ alone): recorded
        once, with no Python object (nothing to hold, nothing to watch die),
        on the storage, named by the line of the forward op that made the
        node ("logits = model(x) (train.py:11, saved 'result' of
        ReluBackward0)"), so that the walk's edge from the node has a tensor
        to end at and the checker a holder for the storage. It ends with the
        storage."""
        rec = self._saved_only.get(srec.skey)
        if rec is None or rec not in srec.tids:
            try:
                stack = self._forward_stack(node._sequence_nr())
            except Exception:
                stack = 0
            name = self._named_at(stack, f"saved '{attr}' of {tname}")
            rec = self._fast.saved_stand_in(srec, name, stack, TENSOR_SAVED_ONLY)
            if len(self._saved_only) >= 1 << 16:
                for k in [k for k, r in self._saved_only.items() if r.tid not in self._by_tid]:
                    del self._saved_only[k]
            self._saved_only[srec.skey] = rec
        return ("t", rec.tid)

    def _autograd_edges(self, orphans: List[NodeKey], starts: Dict[NodeKey, Any],
                        deadline: float, kept: Optional[Dict[int, _StorageRec]] = None,
                        clock: Callable[[], float] = _cpu_clock
                        ) -> Tuple[List[Edge], Dict[NodeKey, Any]]:
        """Edges from autograd nodes that save the storages of ``orphans``
        (and of the storages in ``kept``: _stale_starts' kept by C++ alone).

        Saved tensors live in C++, invisible to gc: search the graphs of the
        live tracked tensors (bounded) for `_saved_*` tensors sharing storage."""
        # A node's saved tensor is the orphan itself where PyTorch saved the
        # tensor as it was (the same object unpacked), else every orphan on
        # its storage: views of one buffer (attention's q, k, v split from one
        # projection) are all orphans on it, and each must reach a holder
        # (one per storage left the others as roots of their own chains).
        want: Dict[int, List[NodeKey]] = {}
        by_obj: Dict[int, NodeKey] = {}
        for k in orphans:
            info = _storage_info(starts[k])
            if info is not None:
                want.setdefault(info[2], []).append(k)
                by_obj[id(starts[k])] = k
        kept = {k: s for k, s in (kept or {}).items() if k not in want}
        if not want and not kept:
            return [], {}
        stands: Set[NodeKey] = set()
        graph = _GradGraphWalk(deadline=deadline, clock=clock)
        edges = graph.edges

        def wanted(v: Any) -> Tuple[List[NodeKey], Optional[Tuple[int, int, int]]]:
            """The wanted tensors a saved value stands for: the orphan
            itself where PyTorch saved it as it was (the same object), else
            every orphan on its storage; and its storage's info (None where
            it is the orphan itself or has none)."""
            same = by_obj.get(id(v))
            if same is not None:
                return [same], None
            info = _storage_info(v)
            return (want.get(info[2], []) if info is not None else []), info

        def visit(node: Any, nkey: NodeKey) -> None:
            """The edges from ``node`` to the wanted tensors it keeps."""
            tname = type(node).__name__
            # a leaf's gradient accumulator keeps the leaf itself: an
            # input made to require grad (a gradient penalty's mix of
            # real and fake) lives as long as a graph that reaches it
            if tname == "AccumulateGrad":
                leaf = getattr(node, "variable", None)
                if isinstance(leaf, _torch.Tensor):
                    k = by_obj.get(id(leaf))
                    if k is not None:
                        edges.append(Edge(nkey, k, "variable"))
                del leaf
            # an autograd.Function's (a compiled model's backward among
            # them): ctx.save_for_backward's tensors, read without
            # unpacking (a SavedTensor's data; a pack hook's result)
            for i, (data, packed) in enumerate(_function_saved(node)):
                label = f"saved_tensors[{i}] of {tname}" + (_PACKED_MARK if packed else "")
                edges.extend(Edge(nkey, o, label) for o in wanted(data)[0])
            for attr in _saved_attrs(type(node)):
                vals, packed = _saved_values(node, attr)
                mark = _PACKED_MARK if packed else ""
                for v in vals:
                    if isinstance(v, _torch.Tensor):
                        held, info = wanted(v)
                        if not held and info is not None and info[2] in kept:
                            k = self._saved_tensor_of(kept[info[2]], node, attr[7:], tname)
                            stands.add(k)
                            held = [k]
                        label = f"SavedTensor '{attr[7:]}' of {tname}{mark}"
                        edges.extend(Edge(nkey, o, label) for o in held)

        # First the nodes of the ops that ran right after each orphan's: the
        # op that saved a tensor mostly took it as an input and made the
        # next tensors, whose grad_fn is that node. Walked from the newest
        # tensor down, a graph kept across batches (an LSTM's hidden state
        # never detached) is thousands of nodes, and a bounded walk never
        # reached the nodes of the first batches.
        near_done: Set[int] = set()
        anchors = [k[1] for k in orphans]
        anchors += [r.tid for srec in kept.values() for r in srec.tids if r.tid]
        near = (tid for anchor in anchors for tid in range(anchor + 1, anchor + 1 + _NEAR_TENSORS))
        for tid in near:
            if len(near_done) >= _NEAR_VISITS:
                break
            rec = self._by_tid.get(tid)
            t = rec.ref() if rec is not None and rec.ref is not None else None
            fn = t.grad_fn if t is not None else None
            del t
            if fn is None or id(fn) in near_done:
                continue
            near_done.add(id(fn))
            nkey: NodeKey = ("g", id(fn))
            graph.nodes[nkey] = fn
            edges.append(Edge(("t", tid), nkey, "grad_fn"))
            visit(fn, nkey)
            del fn
        for rec in _newest_first(self._by_tid):
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
                if info is not None and info[2] in want:
                    edges.extend(Edge(root, k, ".grad") for k in want[info[2]] if k != root)
            del g
            fn = t.grad_fn
            if fn is None:
                continue
            for node, nkey in graph.new_nodes(fn, root):
                if id(node) not in near_done:
                    visit(node, nkey)
                del node
            del fn
        # Keep only the chains that end at a wanted tensor.
        return _chains_to({k for ks in want.values() for k in ks} | stands, graph.edges,
                          graph.nodes)
