"""vramtrace: a CUDA caching allocator that records lifetimes, from Python.

Thin bindings of libvramtrace (loaded with ctypes, see :mod:`vramtrace._lib`)::

    import vramtrace
    vramtrace.mark("step 100")          # a labelled point in the timeline
    vramtrace.snapshot("step100.vtsnap")
    vramtrace.stats()                   # the allocator's counters, as a dict

and the annotation API the reference-graph checker (``vramtrace check``)
reads: tensors, external storages, holders and the references between them.
:mod:`vramtrace.torch` fills it in for PyTorch programs automatically.

Every failure raises :class:`VramtraceError` with a message naming the call.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Tuple

from ._lib import (LibraryNotFoundError, VramtraceError, get_library,
                   set_library)
from .reports import oom_report, oom_text

__all__ = [
    "VramtraceError", "LibraryNotFoundError",
    "library_path", "version",
    "snapshot", "mark", "record_stream", "stats", "reset_peak_stats", "empty_cache",
    "tensor_new", "tensor_use", "tensor_drop",
    "storage_external", "storage_external_free",
    "holder_new", "ref", "unref",
    "add_mark_hook", "remove_mark_hook",
    "set_library",
    "oom_report", "oom_text",
]

__version__ = "0.1.0"

# Called as hook(kind, label_or_path) just before the mark event is recorded
# (kind "mark") or the file is written (kind "snapshot"): the torch tracker
# records there the references that hold stale tensors, so that they are in
# place at the mark where the checker looks at them.
# A tuple, replaced whole by add_mark_hook and remove_mark_hook: a mark runs
# the hooks it found (one that a hook adds or removes counts from the next
# mark) with no copy made. A copy (`list(_hooks)`) is counted by the cyclic
# collector when made and not when freed to the list free list: each mark
# moved the program's count by one, outside any hold (so did every
# optimizer step under `vramtrace run --track`, which marks there).
_hooks: Tuple[Callable[[str, str], None], ...] = ()


def add_mark_hook(fn: Callable[[str, str], None]) -> None:
    """Call ``fn(kind, arg)`` at every :func:`mark` ("mark", label) and
    :func:`snapshot` ("snapshot", path), just before the mark is recorded
    or the snapshot written."""
    global _hooks
    if fn not in _hooks:
        _hooks = _hooks + (fn,)


def remove_mark_hook(fn: Callable[[str, str], None]) -> None:
    """Undo :func:`add_mark_hook`; unknown hooks are ignored."""
    global _hooks
    _hooks = tuple(h for h in _hooks if h != fn)


def _run_hooks(kind: str, arg: str) -> None:
    for fn in _hooks:
        fn(kind, arg)


def library_path() -> str:
    """Path of the loaded libvramtrace.so (loads it if needed)."""
    return str(get_library().path)


def version() -> str:
    """Version string of the loaded library, e.g. "0.1.0"."""
    return str(get_library().version())


# --------------------------------------------------------------------------
# Tracing
# --------------------------------------------------------------------------

def snapshot(path: "str | os.PathLike[str]") -> str:
    """Write a snapshot of the trace and the allocator state to ``path``.

    The file is written atomically (temporary file, then rename).
    Returns the path as a string; raises :class:`VramtraceError` on failure.
    """
    spath = os.fspath(path)
    if not isinstance(spath, str) or not spath:
        raise VramtraceError("snapshot(): path must be a non-empty string")
    lib = get_library()
    try:
        _snapshot_asked(spath)
        lib.snapshot(spath)
    finally:
        lib.snapshot_requested(False)
    return spath


def _snapshot_asked(arg: str) -> None:
    """What a snapshot does before it is written: the program's time stops
    now (the snapshot's time, where `check` ends it), then the hooks run
    (the tracker's holder walk: vramtrace's own work, not the program's).
    ``arg``: the path, or "(exit)" for the exit snapshot (vramtrace._autorun)."""
    get_library().snapshot_requested(True)
    _run_hooks("snapshot", arg)


# Set by the program's first own mark(): from then on `vramtrace run` marks no
# optimizer steps by itself (vramtrace/_autorun.py), the program's marks win.
_program_marks = False


def mark(label: str) -> None:
    """Record a labelled mark (e.g. "step 12") in the timeline."""
    global _program_marks
    if not isinstance(label, str):
        raise TypeError(f"mark(): label must be str, not {type(label).__name__}")
    _program_marks = True
    _mark(label)


def _mark(label: str) -> None:
    lib = get_library()
    _run_hooks("mark", label)
    lib.mark(label)


# --------------------------------------------------------------------------
# Allocator
# --------------------------------------------------------------------------

def record_stream(ptr: int, stream: int) -> None:
    """Declare that the block holding device pointer ``ptr`` is also used on
    ``stream`` (a cudaStream_t as int, e.g. ``torch.cuda.Stream().cuda_stream``).
    Its reuse after free then waits for that stream's work."""
    get_library().record_stream(int(ptr), int(stream))


def stats(device: int = 0) -> Dict[str, Any]:
    """The allocator's counters for ``device`` as a dict.

    Byte and count statistics map to ``{"small_pool"|"large_pool"|"all":
    {"current", "peak", "allocated", "freed"}}``; event counters
    (``num_ooms``, ``num_alloc_retries``, ...) map to ints. Raises
    :class:`VramtraceError` for a device the allocator does not know (on a
    machine without CUDA every device is unknown)."""
    return dict(get_library().get_stats(int(device)))


def reset_peak_stats(device: int = 0) -> None:
    """Set every peak counter of ``device`` to its current value."""
    get_library().reset_peak_stats(int(device))


def empty_cache(device: int = -1) -> None:
    """Return the cache's free segments to the device (-1: every device)."""
    get_library().empty_cache(int(device))


# --------------------------------------------------------------------------
# Annotations (what `vramtrace check` reads)
# --------------------------------------------------------------------------

def tensor_new(data_ptr: int, nbytes: int, base: int = 0, name: str = "") -> int:
    """Declare a tensor viewing ``nbytes`` at ``data_ptr``; ``base`` is the id
    of the tensor it is a view of (0: none). Returns its id."""
    return int(get_library().tensor_new(int(data_ptr), int(nbytes), int(base), name))


def tensor_use(tensor_id: int) -> None:
    """Record a use of tensor ``tensor_id`` (with the caller's stack)."""
    get_library().tensor_use(int(tensor_id))


def tensor_drop(tensor_id: int) -> None:
    """Record that tensor ``tensor_id`` is gone."""
    get_library().tensor_drop(int(tensor_id))


def storage_external(ptr: int, nbytes: int, device: int = -1) -> None:
    """Declare a storage vramtrace did not allocate (``device`` -1: host)."""
    get_library().storage_external(int(ptr), int(nbytes), int(device))


def storage_external_free(ptr: int) -> None:
    """Declare the external storage at ``ptr`` released."""
    get_library().storage_external_free(int(ptr))


def holder_new(name: str) -> int:
    """Declare an object that can hold tensors or holders; returns its id."""
    return int(get_library().holder_new(name))


def ref(src: int, dst: int, label: str = "") -> None:
    """Holder (or tensor) ``src`` references ``dst`` through ``label``."""
    get_library().ref(int(src), int(dst), label)


def unref(src: int, dst: int) -> None:
    """Undo :func:`ref`."""
    get_library().unref(int(src), int(dst))
