"""The tracker's books: one record per tracked tensor and per storage.

The records are the C extension's types, ``_trackfast.TensorRec`` and
``StorageRec`` (``native/trackfast/records.c``: native fields, read and
written here as attributes), made and changed by its rules; the Python
that makes one (a walk's stand-in for a saved tensor) makes it through
this module's ``TensorRec``, set when the extension loads (:func:`use`).
The underscored names are for annotations.
"""

from __future__ import annotations

from typing import Any

_TensorRec = Any    # _trackfast.TensorRec: tid, skey, ref, name, base, pend
_StorageRec = Any   # _trackfast.StorageRec: ptr, nbytes, device, external, tids, ...

TensorRec: Any = None
StorageRec: Any = None


def use(mod: Any) -> None:
    """The loaded ``_trackfast`` extension's record types."""
    global TensorRec, StorageRec
    TensorRec, StorageRec = mod.TensorRec, mod.StorageRec
