"""The tracker's books: one record per tracked tensor and per storage.

The records are the C extension's types (``_trackfast.TensorRec`` and
``StorageRec``: native fields, read here as attributes) once it is loaded
(:func:`use_native`); the classes below stand in for them where it is not
(``VRAMTRACE_TRACKFAST=0``, or no extension for this Python): the same
fields, the same constructors. Make records through this module's
``TensorRec`` and ``StorageRec``, looked up when called.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional, Set, Tuple


class _TensorRec:
    __slots__ = ("tid", "skey", "ref", "name", "base", "pend")

    def __init__(self, skey: int, name: str, base: int,
                 pend: Optional[Tuple[int, int, int]]) -> None:
        self.tid = 0            # recorder tensor id, 0 until recorded
        self.skey = skey        # key of its _StorageRec
        self.ref: Optional["weakref.ref[Any]"] = None  # its callback records the death
        self.name = name
        self.base = base        # root base tensor id if a view, else 0
        self.pend = pend        # (data_ptr, nbytes, stack) until recorded


class _StorageRec:
    __slots__ = ("ptr", "nbytes", "device", "external", "tids", "last_epoch", "skey", "weak",
                 "declared", "seen_epoch", "rest", "twins")

    def __init__(self, ptr: int, nbytes: int, device: int, external: bool, epoch: int,
                 skey: int, weak: int) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device      # -1: host
        self.external = external  # declared with vt_storage_external
        self.tids: Set[_TensorRec] = set()   # its tensors, recorded or not yet
        self.last_epoch = epoch   # marks seen before its last use
        self.skey = skey          # identity of the StorageImpl
        self.weak = weak          # StorageLife handle, 0 when unavailable
        self.declared = False     # an external storage is open at ptr in the trace
        self.seen_epoch = epoch   # last_epoch as the previous mark saw it
        self.rest = 0             # most marks it stayed unused before a use
        # The storages on its very memory, itself included (a copy-on-write
        # clone and its source; one buffer wrapped twice), shared by all of
        # them; one of them is declared. None: it has the memory to itself.
        self.twins: Optional[Set["_StorageRec"]] = None


TensorRec: Any = _TensorRec
StorageRec: Any = _StorageRec


def use_native(mod: Any) -> None:
    """Make records as the loaded ``_trackfast`` extension's types (its C
    path reads and writes their fields directly)."""
    global TensorRec, StorageRec
    TensorRec, StorageRec = mod.TensorRec, mod.StorageRec
