"""Walks of the running frames alone: at a mark whose credit pays no holder
walk, what the running frames hold is still named, with no heap pass.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .._referrers import NodeKey, walk_running_frames
from ._torch_facts import _SKIP_FILES
from ._walks import _cpu_clock

# What the walks' credit may spend on walks of the running frames alone, a
# share of all it earned; and what one such walk is taken to cost until one
# is measured (reading a mark's stale tensors and a few dozen frames' locals).
_FRAMES_ONLY_SHARE = 0.25
_FRAMES_ONLY_S = 0.002


class _FrameWalks:
    """The tracker's walks of the running frames (a mixin of :class:`Tracker`;
    _Walks._walk_stale calls it where it postpones a walk)."""

    def _walk_frames_only(self, threshold: int,
                          starts: Optional[Dict[NodeKey, Any]] = None) -> None:
        """At a mark whose credit pays no walk: the holders of the stale
        tensors no walk has seen among the running frames alone (a local of
        a running function or a global of a script's top level, or an item
        of a list, tuple, dict or deque one of them holds, and of such a
        container in another: _referrers.walk_running_frames), for the
        price of reading the frames, no heap
        pass. A short program's credit pays a walk or two: its later leaks
        (each evaluation's outputs kept in a list, a local of main()) were
        found with no holder at all. What it finds is added to what the
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
            starts, _, _ = self._stale_starts(threshold, False)
        fresh = {k: t for k, t in starts.items()
                 if k[1] not in self._walked and k[1] not in self._frames_walked}
        if read:
            starts.clear()
        if fresh:
            res = walk_running_frames(fresh, self._tensor_key, skip_files=_SKIP_FILES,
                                      ignore_ids=self._ignore_ids() | {id(starts)},
                                      max_nodes=self.max_nodes)
            fresh.clear()
            if res.edges:
                self._book.emit(res, "stale", only=set(), again=self._ring_says_again())
            by_tid = self._by_tid
            self._frames_walked = {t for t in self._frames_walked if t in by_tid}
            self._frames_walked.update(k[1] for k in res.tops)
            self.frame_walks += 1
            del res
        cost = _cpu_clock() - began
        self._frames_cost = cost
        self._frames_spent += cost
