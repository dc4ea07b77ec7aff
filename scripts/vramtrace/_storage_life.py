"""A storage's life, read from the storage itself.

A tensor's Python object is not its storage: ``t.data = other`` and
``t.set_(...)`` move a live tensor to another storage, and
``t.untyped_storage().resize_(0)`` frees a storage's memory while every
tensor on it lives on. The CPU allocator then hands the same address to the
next storage. So the tracker keeps, for each storage it declared, a *weak*
reference to the C++ StorageImpl (``UntypedStorage._weak_ref``, the handle
``torch.multiprocessing`` uses for its storage cache): it says whether the
storage still exists and, through a temporary strong reference, where its
memory is now. A weak reference also keeps the StorageImpl's own address
from being reused while it is held, so the identity (``_cdata``) of a
storage stays unique for as long as the tracker knows it.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Tuple, Union

__all__ = ["StorageLife", "storage_of"]


def storage_of(t: Any) -> Any:
    """The untyped storage of tensor ``t`` (raises for tensors without one)."""
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    if hasattr(t, "_storage"):       # torch < 2.0: Tensor.storage() wraps _storage()
        return t._storage()
    return t.storage()


# (with a Python storage object?) -> what _calibrated found, once per process
_sole_counts: Dict[bool, Optional[int]] = {}


def _calibrated(torch: Any, use_count: Any, with_object: bool = True) -> Optional[int]:
    """The use count a storage reads from the weakref callback of its only
    tensor, measured once on a probe tensor. The probe is made on the CPU
    with the program's modes (TorchFunctionMode, ``torch.device(...)``,
    TorchDispatchMode) out of the way: track() may be entered inside any of
    them, and the program must see no op of ours.

    ``with_object``: the storage had a Python object made for it
    (``untyped_storage()``), which PyTorch keeps as long as the storage: one
    use more than a storage the op observer tracks from what it reads in
    C++ (read with the count of a storage that has one, a storage a second
    tensor still shares, ``nn.Parameter(torch.zeros(n))`` once its
    temporary dies, looks as if it went with the first). Without one the
    key comes from torch._C._storage_id (None where it is missing)."""
    if with_object in _sole_counts:
        return _sole_counts[with_object]
    import weakref
    storage_id = getattr(torch._C, "_storage_id", None)
    seen: list = []
    try:
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            probe = torch.empty(1, dtype=torch.uint8, device="cpu")
            key = probe.untyped_storage()._cdata if with_object else int(storage_id(probe))
            ref = weakref.ref(probe, lambda _r: seen.append(int(use_count(key))))
            del probe
            del ref
    except Exception:
        return None
    _sole_counts[with_object] = seen[0] if seen else None
    return _sole_counts[with_object]


class StorageLife:
    """Weak handles on storages, when this PyTorch has them."""

    def __init__(self, torch: Any) -> None:
        cls = getattr(torch, "UntypedStorage", None)
        names = ("_weak_ref", "_expired", "_free_weak_ref", "_new_with_weak_ptr")
        self._cls = cls if cls is not None and all(hasattr(cls, n) for n in names) else None
        self._torch = torch
        self._reader: Any = None
        self._out: Any = None

        # What a storage's use count reads, from inside the weakref callback
        # of the only tensor on it (the dying TensorImpl still holds it).
        self._use_count = getattr(getattr(torch, "_C", None), "_storage_Use_Count", None)
        self._sole: Optional[int] = None
        self._sole_bare: Optional[int] = None   # for storages without a Python object
        if self._cls is not None and self._use_count is not None:
            self._sole = _calibrated(torch, self._use_count)
            self._sole_bare = _calibrated(torch, self._use_count, with_object=False)

    def read_with(self, reader: Any) -> None:
        """Read storages with ``reader`` (the op observer's
        trackobs_storage_now, a ctypes function) from now on; None: through
        Python again, whose ``data_ptr()`` materializes a copy-on-write
        storage -- a copy the program did not make."""
        self._reader = reader
        self._out = (ctypes.c_uint64 * 2)() if reader is not None else None

    def now(self, handle: int) -> Union[None, bool, Tuple[int, int]]:
        """(data_ptr, nbytes) of the storage now; None once it is gone;
        True where it is alive and PyTorch refuses to hand its memory out
        (cudagraph trees mark an output a later replay overwrote so that
        the program's next read raises): its memory stays where it was,
        and only the op observer's reader can say where that is."""
        if not handle or self._cls is None:
            return None
        reader = self._reader
        if reader is not None:
            out = self._out
            alive = reader(handle, out)
            if alive >= 0:
                return (int(out[0]), int(out[1])) if alive else None
        cls = self._cls
        if cls._expired(handle):
            return None
        st = cls._new_with_weak_ptr(handle)
        if st is None:
            return None
        try:
            return self._address(st), int(st.nbytes())
        except RuntimeError:
            if self._refuses(st):
                return True
            raise
        finally:
            del st

    def _refuses(self, st: Any) -> bool:
        """Whether storage ``st``, alive, refuses its data pointer to every
        reader (its throw_on_immutable_data_ptr). A PyTorch that cannot say
        (2.11 has no torch._C._storage_throw_on_immutable_data_ptr, and its
        cudagraph trees refuse an overwritten output's pointer all the same)
        is taken at its word: the storage lives and its address cannot be
        read, rather than the whole walk failing on it."""
        refuses = getattr(self._torch._C, "_storage_throw_on_immutable_data_ptr", None)
        if refuses is None:
            return True
        try:
            return bool(refuses(st._cdata))
        except Exception:  # noqa: BLE001 - a PyTorch that reads it otherwise: cannot say
            return True

    def _address(self, st: Any) -> int:
        """Where storage ``st``'s memory is, read as StorageImpl::data():
        ``st.data_ptr()`` would materialize a copy-on-write storage (a copy
        the program never made, memory it never allocated). Read through an
        empty tensor set onto it, made past the program's modes (none of
        them sees it) and allocating nothing; ``data_ptr()`` where this
        PyTorch has no ``torch._C._data_address``."""
        torch = self._torch
        address = getattr(torch._C, "_data_address", None)
        if address is None:
            return int(st.data_ptr())
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            on = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
            return int(address(on))
