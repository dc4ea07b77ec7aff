"""``use_allocator()``: PyTorch allocating CUDA memory through libvramtrace.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import vramtrace as _vt
from .._lib import VramtraceError

import torch as _torch


def use_allocator(path: Optional[str] = None) -> None:
    """Make PyTorch allocate CUDA memory through libvramtrace.

    Must be called before the first CUDA allocation of the process (PyTorch
    cannot change allocators once one has allocated). ``path`` defaults to
    the library :mod:`vramtrace` loads. Raises :class:`VramtraceError` when
    this PyTorch has no CUDA or no pluggable allocator (PyTorch < 2.0), or
    when it is too late. Afterwards an allocation vramtrace cannot serve (the
    device is full even after releasing the cache) raises ``RuntimeError``
    ("CUDA out of memory (vramtrace): ...") in the allocating call.
    """
    cuda = getattr(_torch, "cuda", None)
    memory = getattr(cuda, "memory", None)
    pluggable = getattr(memory, "CUDAPluggableAllocator", None)
    change = getattr(memory, "change_current_allocator", None)
    if pluggable is None or change is None:
        raise VramtraceError(
            f"use_allocator(): PyTorch {_torch.__version__} has no "
            "torch.cuda.memory.CUDAPluggableAllocator (it needs PyTorch >= 2.0 "
            "built with CUDA); run the program under `vramtrace run -- python ...` "
            "with PYTORCH_NO_CUDA_MEMORY_CACHING=1 instead")
    if not getattr(_torch.version, "cuda", None) or not _torch.cuda.is_available():
        raise VramtraceError(
            f"use_allocator(): this PyTorch ({_torch.__version__}) has no usable "
            "CUDA (torch.version.cuda is None or no device): nothing to allocate")
    lib_path = path or _vt.library_path()
    alloc_fn, free_fn = "vt_malloc", "vt_free"
    if path is None:
        # libvramtrace_torch.so (next to the library) throws on out of memory,
        # so PyTorch raises RuntimeError instead of handing out a tensor at
        # address 0, which is what it does with vt_malloc's NULL.
        entry = os.path.join(os.path.dirname(lib_path), "libvramtrace_torch.so")
        if os.path.exists(entry):
            lib_path, alloc_fn, free_fn = entry, "vt_torch_malloc", "vt_torch_free"
        else:
            warnings.warn(f"use_allocator(): {entry} is missing (built without a C++ "
                          "compiler?): an allocation vramtrace cannot serve will give a "
                          "tensor at address 0 instead of raising")
    try:
        alloc = pluggable(lib_path, alloc_fn, free_fn)
        change(alloc)
    except RuntimeError as exc:
        raise VramtraceError(
            "use_allocator() must be called before the first CUDA allocation "
            f"(PyTorch said: {exc})") from exc
