"""Reference cycles: what held the tensors a garbage collection freed.
"""

from __future__ import annotations

import gc
import threading
from typing import Any, Dict

from .._referrers import Edge, NodeKey
from .. import _gc_hold


#: Name of the holder that points at tensors freed only by a gc collection.
CYCLE_HOLDER = "reference cycle collected by gc"


class _Cycles:
    """The tracker's view of garbage collections (a mixin of :class:`Tracker`)."""

    @_gc_hold.held
    def _on_gc(self, phase: str, info: Dict[str, Any]) -> None:
        if self._manual_gc:
            return
        # a collection may have freed what held a storage (a cycle through
        # an autograd graph holding its saved tensors)
        if phase == "stop" and (self._maybe_gone or self._held_elsewhere):
            try:
                self._fast.settle()
            except Exception:
                self.errors += 1
        # the collecting thread's: another thread's tensor that dies while
        # this collection runs Python was not freed by it
        self._in_gc = threading.get_ident() if phase == "start" else 0
        self._gc_holder = 0   # one holder per collection, made on first need

    def _collected(self, tid: int) -> None:
        """Tracked tensor ``tid`` died in a collection we did not start (its
        death, recorded by the C path after this): the collection's holder
        refers to it, so the checker sees a reference cycle held it."""
        self.gc_freed += 1
        if not self._gc_holder:
            self._gc_holder = self._book.collection(CYCLE_HOLDER)
        self._lib.ref(self._gc_holder, tid, "cycle")

    def _collect_cycles(self) -> None:
        """Collect garbage cycles, recording what held each tracked tensor.

        The first collection saves the garbage (DEBUG_SAVEALL) so its
        structure can be walked; the second frees it. Tensor weakrefs are
        cleared by the first already, so their deaths queue in _gc_dead."""
        old_debug = gc.get_debug()
        n0 = len(gc.garbage)
        self._manual_gc = threading.get_ident()
        try:
            gc.set_debug(old_debug | gc.DEBUG_SAVEALL)
            gc.collect()
        finally:
            gc.set_debug(old_debug)
            self._manual_gc = 0
        garbage = gc.garbage[n0:]
        del gc.garbage[n0:]
        dead = self._gc_dead[:]
        self._gc_dead.clear()
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
                    self._fast.drop(rec, None)
