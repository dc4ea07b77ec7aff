"""The per-op path in C (the ``_trackfast`` extension), loaded once.
"""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING, Any

from .. import _gc_hold, _native_build
from . import _records
from ._registry import _pending_names, _take_pending_name
from ._torch_facts import _Parameter, _Tensor, _next_sequence_nr, _storage_address
if TYPE_CHECKING:   # only for annotations: _tracker imports this module
    from ._tracker import Tracker

import torch as _torch


def _load_trackfast(libdir: str) -> Any:
    """The _trackfast extension module, or None: inside the installed
    package, or in the build tree whose root holds the library (``libdir``).
    VRAMTRACE_TRACKFAST=0 keeps the tracker in Python."""
    if os.environ.get("VRAMTRACE_TRACKFAST", "1") == "0":
        return None
    mod = _native_build.extension("_trackfast", libdir)
    if mod is None:
        return None
    try:
        from torch._C._dynamo.eval_frame import set_eval_frame
    except ImportError:
        set_eval_frame = None
    mod.setup(_Tensor, _Parameter, _next_sequence_nr, set_eval_frame,
              _pending_names, _take_pending_name,
              getattr(_torch._C, "_storage_id", None), _storage_address)
    _gc_hold.use(mod)
    _records.use_native(mod)
    return mod


_trackfast: Any = False   # not loaded yet


def _trackfast_for(lib: Any) -> Any:
    """The _trackfast module for ``lib`` (loaded once), or None."""
    global _trackfast
    path = getattr(lib, "path", None)
    if not path:
        return None
    if _trackfast is False:
        _trackfast = _load_trackfast(os.path.dirname(str(path)))
    return _trackfast


def _make_fast_path(tracker: "Tracker", raw: Any, stacks: bool) -> Any:
    """A _trackfast.Dispatcher for ``tracker``, or None (Python path)."""
    if not raw or _trackfast_for(tracker._lib) is None:
        return None
    fns = [raw(n) for n in ("vt_tensor_use_stack", "vt_tensor_new_stack", "vt_tensor_drop",
                            "vt_storage_external_stack", "vt_storage_external_free_stack")]
    if any(fn is None for fn in fns):
        return None
    fns.append(raw("vt_tensor_name"))   # optional (format 1.1)
    fns.append(raw("vt_python_frames"))   # optional: else frames read through their objects
    addrs = [(ctypes.cast(fn, ctypes.c_void_p).value or 0) if fn else 0 for fn in fns]
    return _trackfast.Dispatcher(tracker, tracker._stacks.intern_frame, *addrs[:6], bool(stacks),
                                 addrs[6])
