"""Cheap Python stacks for tensor uses.

A stack is captured as a tuple of (code object, instruction offset) pairs,
innermost first, and interned through the library once per distinct tuple:
repeated calls from the same place (every step of a training loop) cost one
frame walk and one dict lookup, with no string formatting. The key holds
``f_lasti``, not ``f_lineno``: a frame's line is looked up in its line table
on every read (3x the cost of the whole walk for 30 frames), its instruction
offset is a field; lines are looked up only for a tuple not seen before.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, FrozenSet, Iterable, List, Tuple

__all__ = ["StackInterner", "package_files"]

_MAX_FRAMES = 48        # deeper stacks keep their innermost frames
_MAX_CACHED = 1 << 16   # distinct stacks before the cache starts over


def package_files() -> FrozenSet[str]:
    """Source files of the vramtrace package (their frames are never shown)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return frozenset(os.path.join(here, n) for n in os.listdir(here) if n.endswith(".py"))


class StackInterner:
    """Capture the caller's Python stack and intern it in the recorder.

    ``skip`` holds file names whose frames are left out (vramtrace itself,
    the dispatch machinery): the innermost frame shown is the user's.
    """

    def __init__(self, lib: Any, skip: Iterable[str] = ()) -> None:
        self._lib = lib
        self._skip = frozenset(skip) | package_files()
        self._cache: Dict[Tuple[Any, ...], int] = {}
        # Stack id -> (file, line) of its innermost frame: where the user's
        # code made what the stack is for.
        self.sites: Dict[int, Tuple[str, int]] = {}
        # Stack id -> its frames (function, file, line), innermost first.
        self.frames: Dict[int, List[Tuple[str, str, int]]] = {}
        self.enabled = True

    def add_skip(self, files: Iterable[str]) -> None:
        """Leave frames of ``files`` out of captured stacks too."""
        self._skip = self._skip | frozenset(files)
        self._cache.clear()

    def capture(self, depth: int = 1) -> int:
        """Stack id of the caller ``depth`` frames up (0: none or disabled)."""
        if not self.enabled:
            return 0
        skip = self._skip
        key: List[Any] = []
        add = key.append
        left = _MAX_FRAMES
        f = sys._getframe(depth)
        while f is not None:
            co = f.f_code
            if co.co_filename not in skip:
                add(co)
                add(f.f_lasti)
                left -= 1
                if not left:
                    break
            f = f.f_back
        tkey = tuple(key)
        sid = self._cache.get(tkey)
        if sid is None:
            frames = []   # walk again, for the lines
            f = sys._getframe(depth)
            while f is not None and len(frames) < _MAX_FRAMES:
                co = f.f_code
                if co.co_filename not in skip:
                    frames.append((getattr(co, "co_qualname", co.co_name), co.co_filename,
                                   int(f.f_lineno or 0)))
                f = f.f_back
            try:
                sid = int(self._lib.intern_stack(frames))
            except Exception:  # a stack is a nicety; never fail the op for it
                sid = 0
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
                self.sites.clear()
                self.frames.clear()
            self._cache[tkey] = sid
            if sid and frames:
                self.sites[sid] = (frames[0][1], frames[0][2])
                self.frames[sid] = frames
        return sid

    def __len__(self) -> int:
        return len(self._cache)


if sys.version_info < (3, 8):  # pragma: no cover
    raise ImportError("vramtrace needs Python 3.8 or newer")
