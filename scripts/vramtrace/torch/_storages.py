"""Storages checked against what they are now, swept at marks, and the
bases only views keep dropped. The books' rules -- declaring, closing and
ending a storage (``native/trackfast/storages.c``), and their rare turns:
memory reused behind our back, twins on one memory, a storage on new
memory, a tensor moved to another storage (``storage_turns.c``) -- are the
C extension's, called here through the tracker's ``_fast``.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Optional

from .._referrers import _Locals, level_passes, referrers_of
from ._records import _TensorRec
from ._torch_facts import _SKIP_FILES, _base_alone_count, _storage_info

# The most wall-clock seconds the bases only views keep wait for the walks'
# credit to pay their heap pass (_Storages._drop_bases_only_views_hold): at
# most a pass (10-40 ms with torch loaded) a second however little credit.
_BASES_PASS_S = 1.0


class _Storages:
    """The tracker's storage books (a mixin of :class:`Tracker`)."""

    # -- storages ------------------------------------------------------------
    def _sweep(self, forced: bool = False) -> None:
        """At a mark: every storage and tensor against what they are now.
        The C path names the few that may have changed (a mark of a big
        model would otherwise pay Python calls for each of its storages).
        ``forced``: a snapshot's or a tick's (the bases only views keep are
        looked for whatever the walks' credit)."""
        fast = self._fast
        fast.settle()
        for srec in fast.storages_to_check():
            # (one that an earlier check in this loop ended has no handle left: nothing asked)
            fast.check_storage(srec, None)
        for rec in fast.tensors_to_check():
            t = rec.ref() if rec.ref is not None else None
            if t is None:
                continue
            info = _storage_info(t)
            if info is not None and info[2] != rec.skey:
                fast.move_tensor(rec, None)
            del t
        self._drop_bases_only_views_hold(forced)

    def _base_rec(self, view: _TensorRec) -> Optional[_TensorRec]:
        """The record of the tensor a recorded view holds as its ``_base``
        (PyTorch's, which may not be the storage's first tensor the record
        names: in ``out.detach()[:, 0]`` it is the detached tensor); None
        where the view is gone or its ``_base`` is not tracked."""
        t = view.ref() if view.ref is not None else None
        base = getattr(t, "_base", None) if t is not None else None
        brec = self._by_obj.get(id(base)) if base is not None else None
        del t, base
        return brec if brec is not None and brec.tid else None

    def _drop_bases_only_views_hold(self, forced: bool = False) -> None:
        """A base tensor the program no longer names but whose views it
        keeps (``out[:, 0]`` of each batch's output kept in a list) lives on
        in PyTorch as its views' ``_base``, Python object and all, so its
        death is never seen; the storage then looks held by its owner, and
        `check`'s pinned rule (small views keeping a dropped base's storage)
        never sees the most common way to pin one. Such a base is dropped
        here, at the mark: its reference count is what nothing but its
        TensorImpl would give it (_base_alone_count), and no object and no
        running frame's local refers to it (one heap pass for them all: the
        same count is read by a tensor one dict holds, whose TensorImpl
        holds no reference). Only bases with a view alive are looked at: the
        storage's first tensor with a view of it, and a tensor that is a
        view's ``_base`` though it shares the storage without being a view
        itself (``out.detach()`` in ``out.detach()[:, 0]``, which the books
        take for a view of ``out``): kept for a column, it would cover the
        whole storage, and the column would pin nothing.

        The heap pass is paid from the walks' credit, or made whatever it
        is once _BASES_PASS_S has gone by since the last (a program that
        waits for its device in a sleep earns little credit), and at a
        snapshot or a tick (``forced``: a tick comes after _TICK_S of ops):
        a loop that keeps a row of each batch's output has a new base every
        step, and a pass a mark (29 ms in a process with torch loaded) more
        than doubled nanoGPT's small steps. Meanwhile the bases wait, still
        owners in the books: dropped some marks late, all in one pass."""
        alone = _base_alone_count()
        if alone is None:
            return
        cands = []
        for srec in self._fast.shared_storages():
            live = {r.tid for r in srec.tids if r.tid}   # recorded (pending ones have none)
            bases = {v.base for v in srec.tids if v.base and v.base in live}
            # a view whose recorded base is gone holds another tensor as its
            # _base (the detached one), which the books call a view too
            for v in srec.tids:
                if v.base and v.base not in live:
                    brec = self._base_rec(v)
                    if brec is not None and brec.tid in live:
                        bases.add(brec.tid)
            for rec in [r for r in srec.tids if r.tid in bases and r.ref is not None]:
                t = rec.ref()
                if t is not None and sys.getrefcount(t) == alone:
                    cands.append((rec, t))
                del t
        if not cands:
            return
        held = {id(c[1]) for c in cands}
        # a running frame's locals first (cheap): a tick inside a forward
        # finds its current op's base named by the forward's locals, and
        # the heap pass is left for the others, if any
        referred = held & set(_Locals(_SKIP_FILES).by_id)
        objs = [c[1] for c in cands if id(c[1]) not in referred]
        now = time.perf_counter()
        if (objs and not forced and not self._credit_pays_a_pass()
                and now - self._bases_passed_at < _BASES_PASS_S):
            self.base_drops_postponed += 1
            return
        if objs:
            self._bases_passed_at = now
            mine = {id(objs), id(cands)} | {id(c) for c in cands}
            began = time.process_time()   # the walks' clock
            found = referrers_of(objs)
            self._pass_cost = (time.process_time() - began) / level_passes(len(objs))
            referred |= {id(x) for r in found if id(r) not in mine
                         for x in gc.get_referents(r) if id(x) in held}
            del found
        del objs
        for rec, t in cands:
            if id(t) not in referred:
                self._fast.drop(rec, None)   # out of the books' index too
            del t
