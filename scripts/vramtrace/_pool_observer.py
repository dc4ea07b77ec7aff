"""PyTorch's own CUDA caching allocator, observed block by block.

Preloaded into a PyTorch program, libvramtrace sees only the segments that
PyTorch's caching allocator asks the device for, not the tensors inside them.
PyTorch calls every *trace tracker* attached to that allocator with each
block it hands out and takes back (``attachAllocatorTraceTracker``), whether
or not its own recorder is on. ``native/pool_observer.cpp``, built at first
use against the torch in use (``_native_build``), attaches one that records
each block, free and segment into vramtrace's ring, with vramtrace's own
native and Python stacks. PyTorch keeps its allocator, its statistics, its
recorder and its behaviour: nothing is replaced.

``attach()`` must run after CUDA's lazy initialization (the per-device
allocators exist then); ``vramtrace run`` queues it with
``torch.cuda._lazy_call`` (``vramtrace/_autorun.py``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import _native_build
from ._lib import get_library

why_not = ""        # why the allocator is not observed ("" while it is, or not tried)
attached = False
unseen = False      # it caches memory the preload cannot see into, unobserved


def _build() -> Any:
    src = _native_build.source("native/pool_observer.cpp")
    lib = _native_build.build(
        "pool_observer", "vramtrace_pool_observer", [src],
        what="the observer of PyTorch's CUDA allocator",
        include_dirs=_native_build.cuda_include_dirs(),
        ldflags=[f"-L{_native_build.torch_lib_dir()}", "-lc10_cuda"])
    fn = lib.pool_observer_attach
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                   ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_EMPTY_CACHE = 13   # VT_EV_EMPTY_CACHE (vramtrace/format.h)


def _wrap(torch: Any, name: str, before: Any = None, after: Any = None) -> None:
    """Wrap ``torch.cuda.memory.NAME`` (and ``torch.cuda.NAME`` when it is
    the same function) so that ``before(*args)`` runs before PyTorch's own
    and ``after(*args)`` once it returned; PyTorch's results and errors as
    they were, the hooks' failures swallowed: recording never changes the
    program."""
    memory = torch.cuda.memory
    original = getattr(memory, name, None)
    if original is None or getattr(original, "_vramtrace_wrapped", False):
        return

    def call(hook: Any, args: Any, kwargs: Any) -> None:
        if hook is not None:
            try:
                hook(*args, **kwargs)
            except Exception:  # noqa: BLE001
                pass

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call(before, args, kwargs)
        result = original(*args, **kwargs)
        call(after, args, kwargs)
        return result

    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper._vramtrace_wrapped = True  # type: ignore[attr-defined]
    setattr(memory, name, wrapper)
    if getattr(torch.cuda, name, None) is original:
        setattr(torch.cuda, name, wrapper)


def _record_empty_cache(torch: Any, lib: Any) -> None:
    """Record each ``torch.cuda.empty_cache()`` before it runs: PyTorch's
    tracker sees only the segment frees it causes, and a replay must empty
    its own cache at the same point (a replay under other settings caches
    other blocks)."""
    event = lib.raw("vt_pool_event")
    if event is None:
        return

    def emptying() -> None:
        if torch.cuda.is_initialized():
            for device in range(torch.cuda.device_count()):
                event(_EMPTY_CACHE, device, 0, 0, 0, 0)

    _wrap(torch, "empty_cache", before=emptying)


# PyTorch's allocator settings as the program runs with them: key -> value,
# the last value of each key (PYTORCH_CUDA_ALLOC_CONF's, then
# _set_allocator_settings's), in the order first set.
_settings: dict = {}
_torch: Any = None
_setter: Any = None


def _merge_settings(text: str) -> None:
    for item in str(text).split(","):
        key, sep, value = item.strip().partition(":")
        if key and sep:
            _settings[key.strip()] = value.strip()


def refresh_settings() -> None:
    """Hand PyTorch's allocator settings to the snapshots (format 1.7), with
    the memory fraction the program set as PyTorch reports it now (the one
    set by the call that initialized CUDA came before attach()). Called by
    attach(), after each setting changes, and at the program's end."""
    if _setter is None:
        return
    getter = getattr(_torch.cuda.memory, "get_per_process_memory_fraction", None)
    try:
        fraction = float(getter()) if getter is not None and _torch.cuda.is_initialized() \
            else 1.0
    except Exception:  # noqa: BLE001
        fraction = 1.0
    if fraction < 1.0:
        _settings["per_process_memory_fraction"] = f"{fraction:g}"
    text = ",".join(f"{k}:{v}" for k, v in _settings.items())
    _setter(text.encode("utf-8", "replace"))


def _record_settings(torch: Any, lib: Any) -> None:
    """Keep PyTorch's allocator settings in the snapshot, so that a replay
    under PyTorch's rules starts from those the program ran with:
    PYTORCH_CUDA_ALLOC_CONF (PYTORCH_ALLOC_CONF, its newer name), then what
    the program sets while it runs (``_set_allocator_settings``,
    ``set_per_process_memory_fraction``)."""
    import os
    global _torch, _setter
    _setter = lib.raw("vt_pool_settings")
    if _setter is None:
        return
    _torch = torch
    _merge_settings(os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
                    or os.environ.get("PYTORCH_ALLOC_CONF") or "")
    refresh_settings()
    _wrap(torch, "_set_allocator_settings",
          after=lambda text, *a, **k: (_merge_settings(text), refresh_settings()))
    _wrap(torch, "set_per_process_memory_fraction", after=lambda *a, **k: refresh_settings())


def attach() -> bool:
    """Observe PyTorch's CUDA caching allocator from now on. Returns True
    when it is observed; False with ``why_not`` saying why (and the
    snapshot saying that this process's tensors were not seen). Never
    raises: a program must run the same whether or not this works."""
    global why_not, attached, unseen
    if attached:
        return True
    try:
        lib = get_library()
    except Exception as exc:  # noqa: BLE001 - no library: nothing to record into
        why_not = f"libvramtrace could not be loaded: {exc}"
        return False
    try:
        try:
            fn = _build()
        except Exception as exc:  # noqa: BLE001
            last = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
            raise RuntimeError(f"its observer could not be built ({last.rstrip('.')})") from exc
        why = ctypes.create_string_buffer(512)
        rc = fn(lib.address("vt_pool_event") or None, lib.address("vt_pool_observe") or None,
                lib.address("vt_pool_oom") or None, why, len(why))
        if rc == 1:   # no cache of PyTorch's own: nothing hidden from the preload
            why_not = why.value.decode("utf-8", "replace")
            return False
        if rc != 0:
            raise RuntimeError(why.value.decode("utf-8", "replace"))
        attached = True
        why_not = ""
        import sys
        torch = sys.modules.get("torch")
        if torch is not None:
            _record_empty_cache(torch, lib)
            _record_settings(torch, lib)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure: say so, change nothing
        why_not = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].rstrip(".")
        unseen = True
        fn_unseen = lib.raw("vt_pool_unseen")
        if fn_unseen is not None:
            fn_unseen()
        return False
