"""track()'s op observer (scripts/trackobs/observer.cpp), built at first use.

The observer is C++ against torch's headers and C++ ABI, so it cannot be
built with vramtrace: it is compiled the first time track() asks for it, by
torch.utils.cpp_extension against the torch in use (about 15 s with g++ and
ninja), into a cache directory keyed by the torch and Python versions, and
loaded from there afterwards. Where it cannot be built (no compiler, no
ninja, no headers), track() keeps its dispatch mode and says why once.

It is used when VRAMTRACE_TRACK_OBSERVER=1 (docs/TRACK_OBSERVER.md: the
observer does not yet do everything the mode does).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import warnings
from typing import Any, Optional

ENV_SWITCH = "VRAMTRACE_TRACK_OBSERVER"
_HERE = os.path.dirname(os.path.abspath(__file__))

# Where observer.cpp is: next to the package in the source tree
# (scripts/trackobs/), inside it when installed.
_SOURCES = (os.path.join(_HERE, "..", "trackobs", "observer.cpp"),
            os.path.join(_HERE, "trackobs", "observer.cpp"))

_module: Any = False   # not tried yet; None: could not be built


def wanted() -> bool:
    """Whether the environment asks for the observer."""
    return os.environ.get(ENV_SWITCH, "") == "1"


def cache_dir(torch_version: str) -> str:
    """The build directory for this torch and Python."""
    root = os.environ.get("VRAMTRACE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vramtrace")
    tag = f"torch-{torch_version}-py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(root, "trackobs", tag.replace("+", "_"))


def load() -> Optional[Any]:
    """The observer module, built if needed; None (with one warning) if it
    cannot be."""
    global _module
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
        path = cpp_extension.load(
            name="vramtrace_trackobs", sources=[os.path.abspath(source)],
            extra_cflags=["-O2", "-DNDEBUG"], build_directory=build, verbose=False,
            is_python_module=False)
        _module = Observer(ctypes.PyDLL(path))
    except Exception as exc:   # noqa: BLE001 - any failure to build means: the mode
        warnings.warn(f"vramtrace.torch: {ENV_SWITCH}=1 but the op observer could not be "
                      f"built ({exc}); tracking through the dispatch mode",
                      RuntimeWarning, stacklevel=3)
    return _module


class Observer:
    """The built library: install(on_owner, on_other, op_for), uninstall()."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        lib.vt_obs_install.argtypes = [ctypes.py_object] * 4 + [ctypes.c_void_p]
        lib.vt_obs_install.restype = ctypes.c_int
        lib.vt_obs_uninstall.argtypes = []
        lib.vt_obs_uninstall.restype = None

    def install(self, on_owner: Any, on_other: Any, op_for: Any,
                engine_frames: Any = lambda: 0, lend: int = 0) -> None:
        """Hand each op of this thread to on_owner(func, args, out), and
        each of its backward's engine threads to on_other, the same way;
        op_for(name, overload) gives the OpOverload of an operator. While
        an engine thread runs an op, the stack id engine_frames() gives is
        lent to it through ``lend``, the address of vramtrace's
        vt_thread_python_stack (0: nothing lent)."""
        if self._lib.vt_obs_install(on_owner, on_other, op_for, engine_frames,
                                    lend or None) != 0:
            raise RuntimeError("vramtrace's op observer is installed already")

    def uninstall(self) -> None:
        """Stop handing ops over."""
        self._lib.vt_obs_uninstall()


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
