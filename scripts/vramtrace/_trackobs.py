"""track()'s op observer (scripts/trackobs/observer.cpp), built at first use.

track() sees ops through this observer, a RecordFunction callback in C++,
where it can be built, and through its dispatch mode otherwise (1.3x on a
loop of small ops before anything is recorded: docs/TRACK_OBSERVER.md).
The observer is C++ against torch's headers and C++ ABI, so it cannot be
built with vramtrace: it is compiled the first time track() runs, by
torch.utils.cpp_extension against the torch in use (about 12 s with g++ and
ninja; one line on stderr says so), into a cache directory keyed by the
torch and Python versions (VRAMTRACE_CACHE_DIR, else ~/.cache/vramtrace),
and loaded from there afterwards. Where it cannot be built (no compiler, no
ninja, no headers) track() uses the mode; `why_not` says why.

VRAMTRACE_TRACK_OBSERVER: unset, the observer where it builds; 1, the
same, and a warning when it does not build; 0, the mode.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import warnings
import zlib
from typing import Any, Optional

ENV_SWITCH = "VRAMTRACE_TRACK_OBSERVER"
_HERE = os.path.dirname(os.path.abspath(__file__))

# Where observer.cpp is: next to the package in the source tree
# (scripts/trackobs/), inside it when installed.
_SOURCES = (os.path.join(_HERE, "..", "trackobs", "observer.cpp"),
            os.path.join(_HERE, "trackobs", "observer.cpp"))

_module: Any = False   # not tried yet; None: could not be built
why_not = ""           # why it could not be built


def wanted() -> bool:
    """Whether the environment lets track() use the observer."""
    return os.environ.get(ENV_SWITCH, "") != "0"


def cache_dir(torch_version: str) -> str:
    """The build directory for this torch and Python."""
    root = os.environ.get("VRAMTRACE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vramtrace")
    tag = f"torch-{torch_version}-py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(root, "trackobs", tag.replace("+", "_"))


def load() -> Optional[Any]:
    """The observer, built if needed; None if it cannot be (``why_not``
    says why; a warning too where VRAMTRACE_TRACK_OBSERVER=1 asked)."""
    global _module, why_not
    if _module is not False:
        return _module
    _module = None
    source = next((p for p in _SOURCES if os.path.isfile(p)), None)
    try:
        if source is None:
            raise RuntimeError("observer.cpp is not installed with this vramtrace")
        import torch
        # its import logs a warning where no CUDA toolkit is found, which the
        # CPU build here does not need: not the program's output
        quiet = logging.getLogger("torch.utils.cpp_extension")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            from torch.utils import cpp_extension
        finally:
            quiet.setLevel(level)
        build = cache_dir(torch.__version__)
        os.makedirs(build, exist_ok=True)
        if not os.path.exists(os.path.join(build, "vramtrace_trackobs.so")):
            print(f"vramtrace: building track()'s op observer for torch {torch.__version__} "
                  f"in {build} (once, about 12 s)", file=sys.stderr, flush=True)
        # cpp_extension rebuilds when a source or a flag changes, not a
        # header: the shared header's digest as a flag makes it rebuild
        header = os.path.join(os.path.dirname(source), "tensor_facts.h")
        with open(header, "rb") as f:
            digest = zlib.crc32(f.read())
        path = cpp_extension.load(
            name="vramtrace_trackobs", sources=[os.path.abspath(source)],
            extra_cflags=["-O2", "-DNDEBUG", f"-DVT_TENSOR_FACTS_CRC={digest}"],
            build_directory=build, verbose=False, is_python_module=False)
        _module = Observer(ctypes.PyDLL(path))
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
        lib.vt_obs_install.argtypes = [ctypes.py_object] * 4 + [ctypes.c_void_p]
        lib.vt_obs_install.restype = ctypes.c_int
        lib.vt_obs_uninstall.argtypes = []
        lib.vt_obs_uninstall.restype = None
        lib.vt_obs_storage_now.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
        lib.vt_obs_storage_now.restype = ctypes.c_int

    def install(self, on_owner: Any, on_other: Any, op_for: Any,
                engine_frames: Any = lambda: 0, lend: int = 0) -> None:
        """Hand each op of this thread to on_owner(func, args, out, facts,
        seq) (Dispatcher.observed), and each of its backward's engine
        threads to on_other(func, args, out, stack); op_for(name, overload)
        gives the OpOverload of an operator.
        While an engine thread runs an op, the stack id engine_frames()
        gives (``stack`` above) is lent to it through ``lend``, the address
        of vramtrace's vt_thread_python_stack (0: nothing lent)."""
        if self._lib.vt_obs_install(on_owner, on_other, op_for, engine_frames,
                                    lend or None) != 0:
            raise RuntimeError("vramtrace's op observer is installed already")

    def uninstall(self) -> None:
        """Stop handing ops over."""
        self._lib.vt_obs_uninstall()

    @property
    def make_weak_address(self) -> int:
        """The address of its vt_obs_make_weak (scripts/trackobs/
        tensor_facts.h), for _trackfast's Dispatcher.weak_maker."""
        return ctypes.cast(self._lib.vt_obs_make_weak, ctypes.c_void_p).value or 0

    @property
    def storage_now(self) -> Any:
        """Its vt_obs_storage_now(handle, out) as a ctypes function: where a
        storage is now, read without materializing a copy-on-write one (for
        StorageLife.read_with)."""
        return self._lib.vt_obs_storage_now

    @property
    def storage_now_address(self) -> int:
        """The address of vt_obs_storage_now, for _trackfast's
        Dispatcher.storage_reader."""
        return ctypes.cast(self._lib.vt_obs_storage_now, ctypes.c_void_p).value or 0


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
