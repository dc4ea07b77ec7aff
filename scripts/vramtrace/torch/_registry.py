"""The trackers running, and names given to tensors no tracker has seen yet.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:   # only for annotations: _tracker imports this module
    from ._tracker import Tracker


_active: List["Tracker"] = []
# The tracker recording in each thread (PyTorch's dispatch modes are per
# thread): a track() nested inside it defers to it.
_tls = threading.local()
# Names given to tensors no tracker has seen yet: id(tensor) -> (weakref, name).
# (Not a WeakKeyDictionary: it would compare tensors with ==.)
_pending_names: Dict[int, Tuple["weakref.ref[Any]", str]] = {}


def _take_pending_name(t: Any) -> Optional[str]:
    got = _pending_names.get(id(t))
    if got is None or got[0]() is not t:
        return None
    del _pending_names[id(t)]
    return got[1]
