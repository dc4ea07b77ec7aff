"""Cheap Python stacks for tensor uses.

A stack is captured as a tuple of (code object identity, instruction offset)
pairs, innermost first, and interned through the library once per distinct
tuple:
repeated calls from the same place (every step of a training loop) cost one
frame walk and one dict lookup, with no string formatting. The key holds
``f_lasti``, not ``f_lineno``: a frame's line is looked up in its line table
on every read (3x the cost of the whole walk for 30 frames), its instruction
offset is a field; lines are looked up only for a tuple not seen before. The
key holds ``id(code)``, not the code object: hashing a code object hashes its
name, bytecode and constants every time (about 1 us for a torch function,
the bulk of a capture), an int's hash is itself. The interner keeps every
code object of a cached key alive, so that an id in a key cannot be reused
by another code object while the key is cached.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, FrozenSet, Iterable, List, Tuple

from . import _gc_hold

__all__ = ["StackInterner", "package_files"]

_MAX_FRAMES = 48        # deeper stacks keep their innermost frames
_MAX_RAW_FRAMES = 4 * _MAX_FRAMES   # frames looked at, shown or skipped
_MAX_CACHED = 1 << 16   # distinct stacks before the cache starts over


def package_files() -> FrozenSet[str]:
    """Source files of the vramtrace package (their frames are never shown)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return frozenset(os.path.join(root, n) for root, _dirs, names in os.walk(here)
                     for n in names if n.endswith(".py"))


class StackInterner:
    """Capture the caller's Python stack and intern it in the recorder.

    ``skip`` holds file names whose frames are left out (vramtrace itself,
    the dispatch machinery): the innermost frame shown is the user's.
    """

    def __init__(self, lib: Any, skip: Iterable[str] = ()) -> None:
        self._lib = lib
        self._skip = frozenset(skip) | package_files()
        self._cache: Dict[Tuple[int, ...], int] = {}
        # id -> code object of every code in a cached key (keeps the ids valid)
        self._codes: Dict[int, Any] = {}
        # Stack id -> (file, line) of its innermost frame of the program's
        # own code (else its innermost frame): where the user's code made
        # what the stack is for.
        self.sites: Dict[int, Tuple[str, int]] = {}
        # Stack id -> its frames (function, file, line), innermost first.
        self.frames: Dict[int, List[Tuple[str, str, int]]] = {}
        self._own: Dict[str, bool] = {}   # source file -> the program's own code?
        self.enabled = True

    def capture(self, depth: int = 1) -> int:
        """Stack id of the caller ``depth`` frames up (0: none or disabled)."""
        if not self.enabled:
            return 0
        # The key holds every frame, skipped ones too: telling them apart
        # costs a file-name lookup per frame, a key per distinct raw stack
        # costs nothing (the library interns equal frame lists once).
        key: List[int] = []
        add = key.append
        left = _MAX_RAW_FRAMES
        # Reading frames gives them Python objects, which live until their
        # functions return: the program's (scripts/vramtrace/native/trackfast/gc_schedule.c).
        made = _gc_hold.count()
        f = sys._getframe(depth)
        while f is not None and left:
            add(id(f.f_code))
            add(f.f_lasti)
            f = f.f_back
            left -= 1
        _gc_hold.as_program(_gc_hold.count() - made)
        tkey = tuple(key)
        sid = self._cache.get(tkey)
        if sid is None:
            sid = self._cache[tkey] = self.intern_frame(sys._getframe(depth))
        return sid

    def intern_frame(self, frame: Any) -> int:
        """Stack id of the stack from ``frame`` outward, interned in the
        library (its lines read now): a raw stack not seen before. Keeps
        the walked code objects alive (their ids are in cached keys)."""
        skip = self._skip
        frames = []
        codes = []
        f = frame
        left = _MAX_RAW_FRAMES
        while f is not None and left and len(frames) < _MAX_FRAMES:
            co = f.f_code
            codes.append(co)
            if co.co_filename not in skip:
                frames.append((getattr(co, "co_qualname", co.co_name), co.co_filename,
                               int(f.f_lineno or 0)))
            f = f.f_back
            left -= 1
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
            self._codes.clear()
            self.sites.clear()
            self.frames.clear()
        for co in codes:
            self._codes[id(co)] = co
        return self.intern_frames(frames)

    def intern_frames(self, frames: List[Tuple[str, str, int]]) -> int:
        """Stack id of ``frames`` (function, file, line; innermost first),
        interned in the library, with its site and frames kept (0: none)."""
        try:
            sid = int(self._lib.intern_stack(frames))
        except Exception:  # a stack is a nicety; never fail the op for it
            sid = 0
        if sid and frames:
            own = next((f for f in frames if self.programs(f[1])), frames[0])
            self.sites[sid] = (own[1], own[2])
            self.frames[sid] = frames
        return sid

    def programs(self, file: str) -> bool:
        """Whether ``file`` is the program's own code (the library's rule,
        asked once per file): a name leads with the innermost such line."""
        own = self._own.get(file)
        if own is None:
            try:
                own = bool(self._lib.source_is_programs(file))
            except Exception:  # an older or fake library: the innermost frame
                own = False
            if len(self._own) >= 1 << 16:
                self._own.clear()
            self._own[file] = own
        return own

    def __len__(self) -> int:
        return len(self._cache)


if sys.version_info < (3, 8):  # pragma: no cover
    raise ImportError("vramtrace needs Python 3.8 or newer")
