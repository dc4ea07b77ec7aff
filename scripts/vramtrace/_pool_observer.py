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
    fn = lib.vt_torch_pool_attach
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_EMPTY_CACHE = 13   # VT_EV_EMPTY_CACHE (vramtrace/format.h)


def _record_empty_cache(lib: Any) -> None:
    """Record each ``torch.cuda.empty_cache()`` before it runs: PyTorch's
    tracker sees only the segment frees it causes, and a replay must empty
    its own cache at the same point (a replay under other settings caches
    other blocks). The function is wrapped where programs look it up."""
    import sys
    torch = sys.modules.get("torch")
    event = lib.raw("vt_pool_event")
    if torch is None or event is None:
        return
    cuda = torch.cuda
    original = cuda.memory.empty_cache
    if getattr(original, "_vramtrace_wrapped", False):
        return

    def empty_cache() -> None:
        try:
            if cuda.is_initialized():
                for device in range(cuda.device_count()):
                    event(_EMPTY_CACHE, device, 0, 0, 0, 0)
        except Exception:  # noqa: BLE001 - recording must never change the program
            pass
        original()

    empty_cache.__doc__ = original.__doc__
    empty_cache.__wrapped__ = original  # type: ignore[attr-defined]
    empty_cache._vramtrace_wrapped = True  # type: ignore[attr-defined]
    cuda.memory.empty_cache = empty_cache
    if cuda.empty_cache is original:
        cuda.empty_cache = empty_cache


_settings = {"conf": "", "fraction": ""}


def refresh_settings() -> None:
    """Record the settings again (the program's end: a fraction set by the
    call that initialized CUDA came after attach()); set by attach()."""


def _settings_text() -> str:
    parts = [p for p in (_settings["conf"], _settings["fraction"]) if p]
    return ",".join(parts)


def _record_settings(lib: Any) -> None:
    """Keep PyTorch's allocator settings in the snapshot (format 1.7), so
    that a replay under PyTorch's rules starts from those the program ran
    with: PYTORCH_CUDA_ALLOC_CONF (PYTORCH_ALLOC_CONF, its newer name),
    then what the program sets while it runs
    (``torch.cuda.memory._set_allocator_settings``,
    ``torch.cuda.set_per_process_memory_fraction``: the last value of each).
    The functions are wrapped where programs look them up, and call
    PyTorch's as they were."""
    import os
    import sys
    torch = sys.modules.get("torch")
    setter = lib.raw("vt_pool_settings")
    if torch is None or setter is None:
        return

    def publish() -> None:
        getter = getattr(torch.cuda.memory, "get_per_process_memory_fraction", None)
        try:   # the fraction set by the call that initialized CUDA, before any wrapper
            fraction = float(getter()) if getter is not None and torch.cuda.is_initialized() \
                else 1.0
        except Exception:  # noqa: BLE001
            fraction = 1.0
        if fraction < 1.0:
            _settings["fraction"] = f"per_process_memory_fraction:{fraction:g}"
        setter(_settings_text().encode("utf-8", "replace"))

    global refresh_settings
    refresh_settings = publish

    _settings["conf"] = (os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
                         or os.environ.get("PYTORCH_ALLOC_CONF") or "").strip()
    publish()
    memory = torch.cuda.memory

    def wrap(owner: Any, name: str, note: Any) -> None:
        original = getattr(owner, name, None)
        if original is None or getattr(original, "_vramtrace_wrapped", False):
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)   # PyTorch's own errors as they were
            try:
                note(*args, **kwargs)
                publish()
            except Exception:  # noqa: BLE001 - recording must never change the program
                pass
            return result

        wrapper.__doc__ = original.__doc__
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper._vramtrace_wrapped = True  # type: ignore[attr-defined]
        setattr(owner, name, wrapper)
        if owner is memory and getattr(torch.cuda, name, None) is original:
            setattr(torch.cuda, name, wrapper)

    def on_settings(text: Any, *args: Any, **kwargs: Any) -> None:
        text = str(text).strip()
        _settings["conf"] = ",".join(p for p in (_settings["conf"], text) if p)

    def on_fraction(fraction: Any, *args: Any, **kwargs: Any) -> None:
        _settings["fraction"] = f"per_process_memory_fraction:{float(fraction):g}"

    wrap(memory, "_set_allocator_settings", on_settings)
    wrap(memory, "set_per_process_memory_fraction", on_fraction)


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
                why, len(why))
        if rc == 1:   # no cache of PyTorch's own: nothing hidden from the preload
            why_not = why.value.decode("utf-8", "replace")
            return False
        if rc != 0:
            raise RuntimeError(why.value.decode("utf-8", "replace"))
        attached = True
        why_not = ""
        _record_empty_cache(lib)
        _record_settings(lib)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure: say so, change nothing
        why_not = (str(exc).strip().splitlines() or [type(exc).__name__])[-1].rstrip(".")
        unseen = True
        fn_unseen = lib.raw("vt_pool_unseen")
        if fn_unseen is not None:
            fn_unseen()
        return False
