"""What the tracker reads of PyTorch, across its versions: the frames that
are dispatch machinery, a tensor's storage and device, what an op does to
its arguments' memory.
"""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from .._stacks import package_files
from .._storage_life import storage_of

import torch as _torch


# Frames never shown in use stacks nor scanned for locals: ours and the
# dispatch machinery between the user's call and __torch_dispatch__.
_TORCH_DIR = os.path.dirname(os.path.abspath(_torch.__file__))
_SKIP_FILES = package_files() | frozenset(
    os.path.join(_TORCH_DIR, p) for p in (
        "_ops.py", os.path.join("utils", "_python_dispatch.py"), "overrides.py",
        os.path.join("utils", "_pytree.py"),
        # torch.set_default_device / `with torch.device(...)`: a function
        # mode (DeviceContext) that calls every factory on the user's behalf.
        os.path.join("utils", "_device.py"),
        # torch 2.x wraps dispatch-mode entry points in torch._dynamo's
        # disable wrappers (eval_frame.DisableContext, _compile._disable_dynamo).
        os.path.join("_dynamo", "eval_frame.py"), "_compile.py"))


# --------------------------------------------------------------------------
# Storage access across PyTorch versions
# --------------------------------------------------------------------------

_Tensor = _torch.Tensor
_Parameter = _torch.nn.Parameter
# Tensor.untyped_storage on torch 2.x, else the version-tolerant lookup.
_untyped_storage = getattr(_Tensor, "untyped_storage", None) or storage_of


# The address of a tensor's storage, read without materializing a
# copy-on-write storage (Tensor.data_ptr() and UntypedStorage.data_ptr() do:
# the program would get a copy it never made); torch >= 2.1.
_storage_address = getattr(_torch._C, "_data_address", None)


def _storage_info(t: Any) -> Optional[Tuple[int, int, int]]:
    """(data_ptr, nbytes, identity) of ``t``'s storage, or None if it has
    none (the identity as native/trackfast/tensors.c's storage_of reads it)."""
    try:
        st = _untyped_storage(t)
        nbytes = st.nbytes()
        ptr = _storage_address(t) if _storage_address is not None else st.data_ptr()
        ident = getattr(st, "_cdata", 0) or ptr
    except Exception:  # sparse, meta, functional wrappers...
        return None
    if nbytes <= 0 or ptr == 0:
        return None
    return ptr, nbytes, ident


_STORAGE_CHANGING_OPS = frozenset(("set_", "resize_", "resize_as_", "_resize_output_",
                                   "resize_as_sparse_"))


# _op_flags: an op may give a tensor other memory (set_, resize_); it writes
# an ``out=`` argument (``mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out)``).
# The same values as trackfast.h's OP_RESHAPES and OP_WRITES_OUT.
OP_RESHAPES, OP_WRITES_OUT = 1, 2


def _op_flags(func: Any) -> int:
    """What ``func`` does besides making its outputs: OP_* flags. A tensor
    the books do not know yet, given as what the op reshapes or writes as
    ``out=`` and returned by it, is made by that op (its memory is the op's
    doing, or was made where no op showed it: inductor's buffers)."""
    packet = getattr(func, "overloadpacket", None)
    name = getattr(packet, "__name__", "") or str(packet)
    flags = OP_RESHAPES if name.split(".")[-1] in _STORAGE_CHANGING_OPS else 0
    try:
        if any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
               for a in func._schema.arguments):
            flags |= OP_WRITES_OUT
    except Exception:   # not an OpOverload: no schema to read
        pass
    return flags


def _view_arg(func: Any) -> int:
    """Index of the argument an op's outputs are views of, -1 if none.

    Inside __torch_dispatch__ an output's ``_base`` is not set yet (autograd
    sets it on the way out), so views are recognized from the schema's alias
    annotations: ``t(Tensor(a) self) -> Tensor(a)``."""
    try:
        schema = func._schema
        rets = [r.alias_info for r in schema.returns]
        if not any(a is not None and not a.is_write for a in rets):
            return -1
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and not arg.alias_info.is_write:
                return i
    except Exception:
        pass
    return -1


# Autograd's node of the running backward op, and the sequence number the
# next node will take.
_current_node = getattr(_torch._C, "_current_autograd_node", lambda: None)
_next_sequence_nr = getattr(getattr(_torch._C, "_autograd", None), "_get_sequence_nr",
                            lambda: 0)


# --------------------------------------------------------------------------
# A base tensor only its views keep
# --------------------------------------------------------------------------

_alone_counts: List[Optional[int]] = []


def _base_alone_count() -> Optional[int]:
    """``sys.getrefcount(t)`` of a base tensor ``t = weakref()`` (a local
    name, as _Storages._drop_bases_only_views_hold reads it) that nothing of
    the program holds, whose TensorImpl only its views keep (their C++
    ``_base``). PyTorch 2.x keeps such a tensor's Python object alive with
    its TensorImpl, so its weakref never fires: the program has dropped it,
    and no death says so. A shared TensorImpl holds its Python object, so a
    base the program still names reads one more. Measured once on a probe
    with the program's modes out of the way; None where the two read the
    same (another PyTorch): then no base is dropped early. Measured when a
    Tracker is made, outside any op: inside an op observer's callback a
    slice is no tracked view (no ``_base``), and the probe would read None."""
    if _alone_counts:
        return _alone_counts[0]
    import sys
    import weakref
    alone: Optional[int] = None
    try:
        # (inference mode out of the way too: its views keep no _base)
        with _torch._C.DisableTorchFunction(), _torch._C._DisableTorchDispatch(), \
                _torch.inference_mode(False):
            base = _torch.empty(2, dtype=_torch.uint8, device="cpu")
            view = base[:1]
            ref = weakref.ref(base)
            t = ref()
            named = sys.getrefcount(t)
            del t, base
            t = ref()
            if t is not None:
                alone = sys.getrefcount(t)
            del t, view, ref
        if alone is not None and alone >= named:
            alone = None
    except Exception:
        alone = None
    _alone_counts.append(alone)
    return alone

