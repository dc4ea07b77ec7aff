"""track()'s op observer (native/trackobs/observer.cpp), built at first use.

track() sees ops through this observer, a RecordFunction callback in C++,
where it can be built, and through its dispatch mode otherwise (1.3x on a
loop of small ops before anything is recorded: docs/TRACK_OBSERVER.md).
The observer is C++ against torch's headers and C++ ABI, so it cannot be
built with vramtrace: it is compiled the first time track() runs, against
the torch in use (``_native_build``: about 12 s with g++ and ninja, one line
on stderr says so), and loaded from its cache afterwards. Where it cannot be built (no compiler, no
ninja, no headers) track() uses the mode; `why_not` says why.

VRAMTRACE_TRACK_OBSERVER: unset, the observer where it builds; 1, the
same, and a warning when it does not build; 0, the mode.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from typing import Any, Optional

from . import _native_build

ENV_SWITCH = "VRAMTRACE_TRACK_OBSERVER"

# Where observer.cpp is in the package (the source tree's and the installed
# one's are laid out alike).
_SOURCE = "native/trackobs/observer.cpp"

_module: Any = False   # not tried yet; None: could not be built
why_not = ""           # why it could not be built


def wanted() -> bool:
    """Whether the environment lets track() use the observer."""
    return os.environ.get(ENV_SWITCH, "") != "0"


def cache_dir(torch_version: str) -> str:
    """The build directory for this torch and Python."""
    return _native_build.cache_dir("trackobs", torch_version)


def load() -> Optional[Any]:
    """The observer, built if needed; None if it cannot be (``why_not``
    says why; a warning too where VRAMTRACE_TRACK_OBSERVER=1 asked)."""
    global _module, why_not
    if _module is not False:
        return _module
    _module = None
    try:
        source = _native_build.source(_SOURCE)
        headers = [os.path.join(os.path.dirname(source), h)
                   for h in ("tensor_facts.h", "held_args.h", "decomposed_ops.h",
                             "frames_of_memory.h", "storage_reads.h", "storage_address.h")]
        lib = _native_build.build("trackobs", "vramtrace_trackobs", [source],
                                  what="track()'s op observer", depends=headers,
                                  python_module=True)
        _module = Observer(lib)
    except Exception as exc:   # noqa: BLE001 - any failure to build means: the mode
        why_not = f"the op observer could not be built: {exc}"
        if os.environ.get(ENV_SWITCH, "") == "1":
            warnings.warn(f"vramtrace.torch: {ENV_SWITCH}=1 but {why_not}; tracking "
                          "through the dispatch mode", RuntimeWarning, stacklevel=3)
    return _module


class Observer:
    """The built library: install(...), uninstall()."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        lib.trackobs_install.argtypes = [ctypes.py_object] * 4 + [ctypes.c_void_p] * 7
        lib.trackobs_install.restype = ctypes.c_int
        lib.trackobs_uninstall.argtypes = []
        lib.trackobs_uninstall.restype = None
        lib.trackobs_join.argtypes = []
        lib.trackobs_join.restype = ctypes.c_int
        lib.trackobs_storage_now.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
        lib.trackobs_storage_now.restype = ctypes.c_int
        lib.trackobs_storage_key.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
        lib.trackobs_storage_key.restype = ctypes.c_int
        lib.trackobs_storage_use_count.argtypes = [ctypes.c_uint64]
        lib.trackobs_storage_use_count.restype = ctypes.c_uint64
        lib.trackobs_decomposed_by.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        lib.trackobs_decomposed_by.restype = ctypes.c_int

    def decomposed_by(self, name: str, overload: str, by_table: bool) -> int:
        """Whether autograd runs operator NAME.OVERLOAD's decomposition
        (1, 0; -1: no such operator), read by OperatorHandle::lookup where
        this torch has it, or by_table from its dispatch table's text (how a
        torch before 2.14 is read): for the tests."""
        return int(self._lib.trackobs_decomposed_by(name.encode(), overload.encode(),
                                                      int(by_table)))

    def install(self, on_owner: Any, on_other: Any, op_for: Any,
                engine_frames: Any = lambda seq: 0, lend: int = 0, gc_api: int = 0,
                lent_reader: int = 0, lent_table: int = 0, marking: int = 0,
                engine_uses: int = 0, dispatcher: int = 0) -> None:
        """Hand each op of this thread to on_owner(func, args, out, facts,
        seq) (Dispatcher.observed), and each of its backward's engine
        threads to on_other(func, args, out, facts, stack[, storage_uses])
        (Dispatcher.observed_engine); op_for(name, overload) gives the
        OpOverload of an operator.
        While an engine thread runs an op, the stack id engine_frames(seq)
        gives for the sequence number of the autograd node it runs
        (``stack`` above) is lent to it through ``lend``, the address of
        vramtrace's vt_thread_python_stack (0: nothing lent). ``gc_api``:
        _trackfast's GC_HOLD_API, the collector's count held while the
        observer works in Python (0: not held). ``lent_reader(lent_table,
        seq)``: the stack id to lend read without the GIL, from _trackfast's
        table (Dispatcher.lent_reader, .lent_table; tensor_facts.h), before
        engine_frames is asked (0: ask it always). ``marking``: the address
        of the thread ident doing a mark's work now (Dispatcher.marking_address;
        another thread's op waits for it; 0: none waits). ``engine_uses``: the
        address of _trackfast's engine_uses (Dispatcher.engine_uses_address),
        called with ``dispatcher`` (its id) for a backward op whose outputs
        died before the hand-over, instead of on_other (0: on_other always)."""
        if self._lib.trackobs_install(on_owner, on_other, op_for, engine_frames,
                                    lend or None, gc_api or None, lent_reader or None,
                                    lent_table or None, marking or None,
                                    (engine_uses or None) if dispatcher else None,
                                    dispatcher or None) != 0:
            raise RuntimeError("vramtrace's op observer is installed already")

    def join(self) -> bool:
        """Hand this thread's ops over too, as the installing thread's (its
        backward's engine threads' as theirs), until uninstall(); False
        when it is not installed."""
        return self._lib.trackobs_join() == 0

    def uninstall(self) -> None:
        """Stop handing ops over."""
        self._lib.trackobs_uninstall()

    @property
    def make_weak_address(self) -> int:
        """The address of its trackobs_make_weak (scripts/vramtrace/native/trackobs/
        tensor_facts.h), for _trackfast's Dispatcher.weak_maker."""
        return ctypes.cast(self._lib.trackobs_make_weak, ctypes.c_void_p).value or 0

    @property
    def drain_address(self) -> int:
        """The address of its trackobs_drain (the engine threads' ops it holds
        back, handed over now), for _trackfast's Dispatcher.engine_drainer."""
        return ctypes.cast(self._lib.trackobs_drain, ctypes.c_void_p).value or 0

    @property
    def storage_now(self) -> Any:
        """Its trackobs_storage_now(handle, out) as a ctypes function: where a
        storage is now, read without materializing a copy-on-write one (for
        StorageLife.read_with)."""
        return self._lib.trackobs_storage_now

    @property
    def storage_now_address(self) -> int:
        """The address of trackobs_storage_now, for _trackfast's
        Dispatcher.storage_reader."""
        return ctypes.cast(self._lib.trackobs_storage_now, ctypes.c_void_p).value or 0

    @property
    def storage_key_address(self) -> int:
        """The address of trackobs_storage_key (a tensor's StorageImpl from
        its TensorImpl, torch._C._storage_id's reading), for _trackfast's
        Dispatcher.read_storages_with."""
        return ctypes.cast(self._lib.trackobs_storage_key, ctypes.c_void_p).value or 0

    @property
    def use_count_address(self) -> int:
        """The address of trackobs_storage_use_count (a storage's strong count
        through its weak handle, torch._C._storage_Use_Count's reading), for
        _trackfast's Dispatcher.use_counter."""
        return ctypes.cast(self._lib.trackobs_storage_use_count, ctypes.c_void_p).value or 0


def op_for(name: str, overload: str) -> Any:
    """The OpOverload of operator ``name`` ("aten::addmm") and overload
    ("" for the default one), as a dispatch mode is given; None if there is
    none in torch.ops."""
    import torch
    ns, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, ns), op)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        return None
