"""The tracker's books and per-op path in C (the ``_trackfast`` extension),
loaded once. track() needs it: where it is not built for the Python in use
(CPython 3.11 or newer, built with the package), track() records nothing
and says why (``Tracker.__enter__``).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from .. import _gc_hold, _native_build, _referrers
from . import _records
from ._registry import _pending_names, _take_pending_name
from ._torch_facts import _Parameter, _Tensor, _next_sequence_nr, _storage_address
if TYPE_CHECKING:   # only for annotations: _tracker imports this module
    from ._tracker import Tracker

import torch as _torch


def _load_trackfast(libdir: str) -> Any:
    """The _trackfast extension module, or None: inside the installed
    package, or in the build tree whose root holds the library (``libdir``)."""
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
    # the Python objects PyTorch keeps for its C++ objects, which a walk
    # makes and the program frees: an autograd node's (every C++ node's type
    # frees alike) and a storage's (its classes free through the C base's)
    mod.gc_torch_kept_types([t for t in (getattr(_torch._C._functions, "AccumulateGrad", None),
                                         getattr(_torch._C, "StorageBase", None))
                             if isinstance(t, type)])
    _gc_hold.use(mod)
    _referrers.use(mod)
    _records.use(mod)
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
    use_text_call = getattr(lib, "use_text_call", None)
    if _trackfast is not None and use_text_call is not None:
        use_text_call(_trackfast.call_with_text)   # its marks in C from now on
    return _trackfast


def _ring_calls(fast: Any, lib: Any) -> Tuple[Optional[Callable[[], Any]], Callable[[int], Any]]:
    """The two library calls a mark makes besides its own, chosen once:
    (read the ring's window, record a pause of ns). The Dispatcher's C
    calls where it holds the library's entry points (vt_trace_window,
    vt_paused: _make_fast_path passes them), for a ctypes call made right
    after a step, its code out of the caches, costs many times its warm
    cost; else the library's own (Library.trace_window, Library.paused;
    the window None where the library has no such method)."""
    raw = getattr(lib, "raw", None)
    in_c = fast is not None and raw is not None
    window = (fast.trace_window if in_c and raw("vt_trace_window")
              else getattr(lib, "trace_window", None))
    paused = fast.paused if in_c and raw("vt_paused") else lib.paused
    return window, paused


def _make_fast_path(tracker: "Tracker", raw: Any, stacks: bool) -> Tuple[Any, Optional[str]]:
    """A _trackfast.Dispatcher for ``tracker`` and None, or None and why
    there is none (what track() says when it records nothing)."""
    if sys.version_info < (3, 11):
        return None, (f"it needs CPython 3.11 or newer (this is "
                      f"{sys.version_info[0]}.{sys.version_info[1]})")
    if not raw:
        return None, f"the library {getattr(tracker._lib, 'path', '?')} gives no C entry points"
    if _trackfast_for(tracker._lib) is None:
        return None, ("vramtrace's compiled part (vramtrace._trackfast) is not built for "
                      f"this Python ({sys.executable}); rebuild or reinstall vramtrace with it")
    names = ("vt_tensor_use_stack", "vt_tensor_new_stack", "vt_tensor_drop",
             "vt_storage_external_stack", "vt_storage_external_free_stack", "vt_tensor_name")
    fns = [raw(n) for n in names]
    missing = [n for n, fn in zip(names, fns) if fn is None]
    if missing:
        return None, (f"the library {getattr(tracker._lib, 'path', '?')} is older than this "
                      f"package (no {', '.join(missing)})")
    fns.append(raw("vt_python_frames"))   # optional: else frames read through their objects
    fns.append(raw("vt_tensor_again"))    # optional: else nothing is declared again
    # optional: else read and recorded through ctypes (_ring_calls)
    fns.append(raw("vt_trace_window"))
    fns.append(raw("vt_paused"))
    # optional: else every device storage is taken for a block of the allocator
    fns.append(raw("vt_pool_block_at"))
    addrs = [(ctypes.cast(fn, ctypes.c_void_p).value or 0) if fn else 0 for fn in fns]
    return _trackfast.Dispatcher(tracker, tracker._stacks.intern_frame, *addrs[:6], bool(stacks),
                                 *addrs[6:]), None
