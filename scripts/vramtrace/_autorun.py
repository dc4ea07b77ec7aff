"""What ``vramtrace run`` does inside a Python program, unasked.

``vramtrace run`` puts ``vramtrace/_boot`` on PYTHONPATH; its
``sitecustomize`` calls :func:`start` before the program's first line. From
then on, when the program imports torch:

- once CUDA is initialized (``torch.cuda._lazy_call``: the per-device
  allocators exist then), PyTorch's caching allocator is observed
  (``_pool_observer``): every tensor's block recorded with its stack, and
  PyTorch's allocator, statistics and recorder left exactly as they are;
- every ``optimizer.step()`` of the optimizer that paces the training
  records a mark "step N" (PyTorch's global optimizer hooks), so
  ``vramtrace check``'s step rules work on a program without marks; a
  program that calls ``vramtrace.mark()`` itself keeps only its own. The
  pace is the first optimizer that steps, until another one steps
  _HANDOVER_STEPS times in a row without it (layer-wise or stage-wise
  training: a second optimizer trains alone while the first one lives on);
  optimizers that take turns within a step (a GAN's) leave it where it is;
- with ``VRAMTRACE_CONF=torch:track`` (``vramtrace run --track``), the
  whole program runs under ``vramtrace.torch.track()``, which names holders.

In every Python program (torch or not, ``torch:off`` too) the exit
snapshot is written when the program's own work is over, by the last of its
atexit handlers, before Python's teardown frees what it still held.

``torch:off`` does none of the torch part; neither does PYTORCH_NO_CUDA_MEMORY_CACHING=1
(torch's switch: then PyTorch caches nothing, and every tensor is a
``cudaMalloc`` that the preloaded library records itself). Nothing here may change what the program
computes, prints or raises: every failure is reported on stderr (and to
``vramtrace run``, which repeats it at the end) and otherwise ignored.
"""

from __future__ import annotations

import _thread
import functools
import importlib.util
import os
import sys
import weakref
from typing import Any, Callable, Optional, Tuple

_MODES = ("observe", "track", "off")

_started = False
_step = 0
_step_optimizer: Optional["weakref.ref[Any]"] = None
# Steps in a row of another optimizer than _step_optimizer that hand the
# marks over to it. Not 2: a GAN whose generator steps twice per
# discriminator step would move its marks to the generator and back.
_HANDOVER_STEPS = 3
_other: Optional["weakref.ref[Any]"] = None   # that other optimizer ...
_other_steps = 0                              # ... and its steps in a row
_tracker: Any = None
# run --track's way out of track(), with the thread that entered it; None
# once left (at exit, or before os._exit: _end_before_hard_exit)
_leave_tracker: Optional[Tuple[int, Callable[[], None]]] = None
_track_pending = False   # run --track, asked while vramtrace.torch was importing


def mode() -> str:
    """The ``torch`` key of VRAMTRACE_CONF (the last one wins, as in the
    library's parser): observe (default), track or off."""
    value = "observe"
    for item in os.environ.get("VRAMTRACE_CONF", "").split(","):
        key, _, val = item.strip().partition(":")
        if key.strip() == "torch" and val.strip().lower() in _MODES:
            value = val.strip().lower()
    return value


def note(message: str) -> None:
    """Say ``message`` without touching what the program writes: under
    ``vramtrace run`` it goes to the run directory's notes file, and run says
    it once the program has ended; otherwise (or when that file cannot be
    written) straight to file descriptor 2. Never through ``sys.stderr``: a
    program that captures or redirects its stderr would see our line as its
    own output (the differential suite compares it)."""
    run_dir = os.environ.get("VRAMTRACE_RUN_DIR")
    if run_dir:
        try:
            fd = os.open(os.path.join(run_dir, "notes"),
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, f"{os.getpid()}\t{message}\n".encode("utf-8", "replace"))
            finally:
                os.close(fd)
            return
        except OSError:
            pass
    try:
        os.write(2, f"vramtrace: {message}\n".encode("utf-8", "replace"))
    except OSError:  # a closed stderr must not matter
        pass


def start() -> None:
    """Arrange for what the module docstring says; called once per process."""
    global _started
    if _started:
        return
    _started = True
    # Registered first, so it runs last of the program's atexit handlers.
    import atexit
    atexit.register(_program_ended)
    _end_before_hard_exit()
    if mode() == "off":
        return
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        _on_torch(torch)
    else:
        sys.meta_path.insert(0, _TorchImportWatch())


def _program_ended() -> None:
    """The exit snapshot, taken when the program's own work is over: Python
    runs this handler before it tears the program's objects down, so the
    tensors the program still held at its end are alive in the snapshot
    (freed by the teardown, they would read as the program's frees, and a
    list that kept a tensor every step would look released)."""
    try:
        import vramtrace
        from vramtrace import _pool_observer
        if _pool_observer.attached:
            try:
                _pool_observer.refresh_settings()
            except Exception:  # noqa: BLE001 - the settings as last recorded
                pass
        vramtrace.get_library().program_ended()
    except Exception as exc:  # noqa: BLE001 - the snapshot is then taken at exit
        note(f"the snapshot is taken at exit, after Python's teardown ({type(exc).__name__}: {exc})")


def _end_before_hard_exit() -> None:
    """os._exit() runs no exit handler: a script that ends with it (DDP
    scripts' way round a hang in NCCL's teardown) got no exit snapshot. In
    this process (not in a forked child: multiprocessing's workers end with
    os._exit and write nothing, as before) it now leaves run --track's
    track() (on the thread that entered it) and writes the snapshot first;
    the program's own exit handlers still do not run, its status is its own."""
    real = os._exit
    pid = os.getpid()

    @functools.wraps(real)
    def _exit(status: int) -> None:
        if os.getpid() == pid:
            if _leave_tracker is not None and _leave_tracker[0] == _thread.get_ident():
                _leave_tracker[1]()
            _program_ended()
        real(status)

    os._exit = _exit


class _TorchImportWatch:
    """A meta-path finder that finds nothing itself: when ``torch`` is
    imported, it lets the usual finders find it and runs :func:`_on_torch`
    once the import has completed."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        inner = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                inner(module)
            finally:
                try:
                    del loader.exec_module   # the loader as it was
                except AttributeError:
                    pass
            _on_torch(module)

        loader.exec_module = exec_module
        return spec


def observe_when_cuda_starts(torch: Any) -> None:
    """Observe PyTorch's CUDA caching allocator once CUDA is initialized
    (at once when it is already): its per-device allocators exist then."""
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and hasattr(cuda, "_lazy_call"):
        cuda._lazy_call(_observe_allocator)


def _on_torch(torch: Any) -> None:
    global _track_pending
    try:
        observe_when_cuda_starts(torch)
        # torch.optim deletes its submodule's name; `import torch` loaded it
        optimizer = sys.modules.get("torch.optim.optimizer")
        hook = getattr(optimizer, "register_optimizer_step_post_hook", None)
        if hook is not None:
            hook(_on_optimizer_step)
        if mode() == "track":
            if _importing_the_torch_package():
                _track_pending = True   # started by torch_package_ready()
            else:
                _track_whole_program()
    except Exception as exc:  # noqa: BLE001 - the program goes on as without us
        note(f"could not prepare to observe PyTorch ({type(exc).__name__}: {exc})")


def _importing_the_torch_package() -> bool:
    """Whether torch is being imported by ``vramtrace.torch`` itself (a
    program that imports ``vramtrace.torch`` before torch): its track()
    does not exist yet, so tracking waits for the end of that import."""
    package = sys.modules.get("vramtrace.torch")
    return package is not None and not hasattr(package, "track")


def torch_package_ready() -> None:
    """Called by ``vramtrace.torch`` at the end of its import: under ``run
    --track``, the tracking that its own import of torch asked for starts
    now, on the thread that imported it."""
    global _track_pending
    if not _track_pending:
        return
    _track_pending = False
    try:
        _track_whole_program()
    except Exception as exc:  # noqa: BLE001 - the program goes on as without us
        note(f"could not prepare to observe PyTorch ({type(exc).__name__}: {exc})")


def _observe_allocator() -> None:
    """Queued for CUDA's lazy initialization; must never raise (torch
    would turn it into the program's error)."""
    try:
        if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
            return   # no cache: every tensor is a cudaMalloc the preload records
        from . import _pool_observer
        if not _pool_observer.attach() and _pool_observer.unseen:
            fix = ("install a C++ compiler and ninja (pip install ninja) for the observer's "
                   "one-time build, or run with " if "could not be built" in
                   _pool_observer.why_not else "run with ")
            note("PyTorch's CUDA allocator is not observed: " + _pool_observer.why_not +
                 ". This run's snapshot shows PyTorch's segments, not its tensors; "
                 "`vramtrace check` cannot name leaks in it. Fix: " + fix +
                 "PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every tensor a cudaMalloc; changes "
                 "PyTorch's caching).")
    except BaseException as exc:  # noqa: BLE001
        note(f"observing PyTorch's CUDA allocator failed ({type(exc).__name__}: {exc})")


def _on_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """After every step of the optimizer that paces the training: mark
    "step N" (the module's docstring says which one that is)."""
    global _step, _step_optimizer, _other, _other_steps
    try:
        import vramtrace
        if vramtrace._program_marks:
            return
        pace = _step_optimizer() if _step_optimizer is not None else None
        if pace is None:
            _step_optimizer = weakref.ref(optimizer)
        elif pace is not optimizer:
            other = _other() if _other is not None else None
            _other_steps = _other_steps + 1 if other is optimizer else 1
            _other = weakref.ref(optimizer)
            if _other_steps < _HANDOVER_STEPS:
                return
            _step_optimizer = _other
        _other, _other_steps = None, 0
        _step += 1
        vramtrace._mark(f"step {_step}")
    except Exception:  # noqa: BLE001 - a mark lost, the program unchanged
        pass


def _track_whole_program() -> None:
    """Enter vramtrace.torch.track() for the rest of the program (the thread
    that imported torch), left at interpreter exit before the exit
    snapshot is written."""
    global _tracker, _leave_tracker
    import atexit

    import vramtrace
    import vramtrace.torch as vtt
    _tracker = vtt.track(threads=True)
    _tracker.say = lambda message: note(message.replace("vramtrace.torch: ", "", 1))
    _tracker.__enter__()

    def leave() -> None:
        global _leave_tracker
        if _leave_tracker is None:   # left already (os._exit, then no atexit)
            return
        _leave_tracker = None
        try:
            # what a vramtrace.snapshot() call does first: its time taken,
            # the holders of every stale tensor looked up (the exit snapshot,
            # written by _program_ended after this, records no walk itself),
            # then the tracker closed
            vramtrace._snapshot_asked("(exit)")
            _tracker.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            note(f"leaving track() at exit failed ({type(exc).__name__}: {exc})")

    _leave_tracker = (_thread.get_ident(), leave)
    atexit.register(leave)
