"""Native parts: where they are, and those built at first use.

Every native source is in the package's ``native/`` folder, in the source
tree as installed. The C extension ``_trackfast`` is built with the library
and imported as ``vramtrace._trackfast`` (``extension()``: a build tree's
folder of it joins the package's path). Two parts are C++ against torch's headers and
C++ ABI, so they cannot ship prebuilt: track()'s op observer (``_trackobs``) and the observer
of PyTorch's caching allocator (``_pool_observer``). Each is compiled the
first time it is needed, by ``torch.utils.cpp_extension`` (g++ and ninja),
into a cache directory keyed by the torch and Python versions
(``VRAMTRACE_CACHE_DIR``, else ``~/.cache/vramtrace``), announced by one line
on stderr, and loaded from there afterwards without importing the build
machinery again (a stamp file says which sources and flags it was built from).
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import hashlib
import logging
import os
import sys
from typing import Any, List, Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))


def cache_root() -> str:
    """The folder every built part goes under."""
    return os.environ.get("VRAMTRACE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vramtrace")


def cache_dir(part: str, torch_version: str) -> str:
    """The build directory of ``part`` for this torch and Python."""
    tag = f"torch-{torch_version}-py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(cache_root(), part, tag.replace("+", "_"))


def source(name: str) -> str:
    """The native source at package-relative path ``name``: the source tree
    and the installed package keep them at the same place (``native/``)."""
    path = os.path.normpath(os.path.join(_HERE, name))
    if not os.path.isfile(path):
        raise RuntimeError(f"{os.path.basename(name)} is not installed with this vramtrace")
    return path


def extension(name: str, libdir: str) -> Any:
    """The package's compiled extension ``name`` (``_trackfast``), or None
    where it is not built: imported as ``vramtrace.NAME``, one way for an
    installed package (a wheel, an install: the extension is inside it) and
    a source tree's. A meson build tree keeps the package's compiled parts
    where the package's folder is in it (``scripts/vramtrace/`` under its
    root, ``libdir``, where the library was found), a folder added here to
    the package's ``__path__``, so that the import finds them there."""
    import importlib
    package = sys.modules[__package__]
    built = os.path.join(libdir, "scripts", "vramtrace")
    if os.path.isdir(built) and built not in package.__path__:
        package.__path__.append(built)
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None


def cuda_include_dirs() -> List[str]:
    """Folders with the CUDA runtime's headers, which torch's c10/cuda
    headers include: the NVIDIA runtime wheel that a CUDA build of torch
    depends on (its own version), then a toolkit (CUDA_HOME, /usr/local/cuda)."""
    dirs: List[str] = []
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
        for root in getattr(nvidia, "__path__", []):
            dirs += sorted(glob.glob(os.path.join(root, "cu*", "include")))
            dirs += sorted(glob.glob(os.path.join(root, "cuda_runtime", "include")))
    except ImportError:
        pass
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs.append(os.path.join(home, "include"))
    # resolved: a build is known by its flags (build()'s stamp), and one
    # environment reached by two paths (a venv behind a link, its Python
    # started by either) would otherwise rebuild at each change of path
    return [os.path.realpath(d) for d in dirs
            if os.path.isfile(os.path.join(d, "cuda_runtime_api.h"))]


def build(part: str, name: str, sources: Sequence[str], *, what: str,
          cflags: Sequence[str] = (), include_dirs: Sequence[str] = (),
          ldflags: Sequence[str] = (), depends: Sequence[str] = (),
          python_module: bool = False) -> ctypes.CDLL:
    """Build (once) and load the shared object ``name`` from ``sources``.

    ``what`` names the part for the announcement ("track()'s op observer");
    ``depends`` are headers whose change must rebuild it. Loaded with
    ``ctypes.PyDLL`` when ``python_module`` (it calls the Python C API under
    the GIL), else ``ctypes.CDLL``. Raises with the compiler's reason when
    it cannot be built."""
    import torch
    folder = cache_dir(part, torch.__version__)
    target = os.path.join(folder, f"{name}.so")
    digest = hashlib.sha256()
    for path in list(sources) + list(depends):
        with open(path, "rb") as f:
            digest.update(f.read())
    for flag in list(cflags) + list(include_dirs) + list(ldflags):
        digest.update(flag.encode())
    stamp = os.path.join(folder, f"{name}.stamp")
    want = digest.hexdigest()
    loader = ctypes.PyDLL if python_module else ctypes.CDLL
    if _built(stamp, target, want):
        return loader(target)
    os.makedirs(folder, exist_ok=True)
    # The ranks of a job (torchrun's, a spawned trainer's) start together and
    # each finds the part missing: one builds it while the others wait, then
    # find it built (before, a line "building" from each rank, and
    # cpp_extension's own lock made all but one wait without saying why).
    with open(os.path.join(folder, f"{name}.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:
            pass   # a file system without locks (ENOLCK): built as before, by each
        if _built(stamp, target, want):
            return loader(target)
        return _build_locked(name, sources, what=what, folder=folder, stamp=stamp, want=want,
                             cflags=cflags, include_dirs=include_dirs, ldflags=ldflags,
                             loader=loader)


def _built(stamp: str, target: str, want: str) -> bool:
    """Whether ``target`` was built from the sources and flags ``want``
    digests (its stamp says so)."""
    try:
        with open(stamp) as f:
            return f.read().strip() == want and os.path.exists(target)
    except OSError:
        return False


def _build_locked(name: str, sources: Sequence[str], *, what: str, folder: str, stamp: str,
                  want: str, cflags: Sequence[str], include_dirs: Sequence[str],
                  ldflags: Sequence[str], loader: Any) -> ctypes.CDLL:
    """build()'s compile and load, under its lock: announced, then ``stamp``
    written (``want``) once it loads."""
    import torch
    print(f"vramtrace: building {what} for torch {torch.__version__} in {folder} "
          "(once per torch version)", file=sys.stderr, flush=True)
    # cpp_extension's import logs a warning where no CUDA toolkit is found,
    # which these CPU-compiled parts do not need: not the program's output
    quiet = logging.getLogger("torch.utils.cpp_extension")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        quiet.setLevel(level)
    path = cpp_extension.load(
        name=name, sources=[os.path.abspath(s) for s in sources],
        extra_cflags=["-O2", "-DNDEBUG", f"-DVT_BUILD_DIGEST={want[:16]}", *cflags],
        extra_include_paths=list(include_dirs), extra_ldflags=list(ldflags),
        build_directory=folder, verbose=False, is_python_module=False)
    lib = loader(path)
    with open(stamp, "w") as f:
        f.write(want + "\n")
    return lib


def torch_lib_dir() -> str:
    """torch's own folder of shared libraries (libc10_cuda.so ...)."""
    import torch
    # resolved, as cuda_include_dirs() says why
    return os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib"))
