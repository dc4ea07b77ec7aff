"""The tracker: its state, and entering and leaving ``track()``.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import operator
import sys
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

import vramtrace as _vt
from .._lib import get_library
from .._holders import HolderBook
from .._stacks import StackInterner
from .._storage_life import StorageLife
from .. import _gc_hold, _trackobs
from ._cycles import _Cycles
from . import _fast_path
from ._fast_path import _make_fast_path, _ring_calls
from ._marks import _NO_TICK, _QUIET_GAPS, _TICK_S, _Marks
from ._naming import _Naming
from ._recording import _Mode, _Recording, _get_ident, _let_engine_threads_go
from ._frame_walks import _FRAMES_ONLY_S, _FrameWalks
from ._walks import _FIRST_PASS_S
from ._records import _StorageRec, _TensorRec
from ._registry import _active, _tls
from ._storages import _Storages
from ._torch_facts import _SKIP_FILES, _base_alone_count
from ._walks import _Walks

import torch as _torch

_said_blind = False   # track() said once that it records nothing


def _books_field(name: str) -> Any:
    """A field of the tracker's books (the Dispatcher's, which the C rules
    read and write; a blind tracker's _NoBooks), as a tracker attribute."""
    # read by a C getter (no Python frame): a mark reads a few of them
    return property(operator.attrgetter("_books." + name),
                    lambda self, value: setattr(self._books, name, value))


class _NoBooks:
    """The books of a tracker that records nothing (no _trackfast): what
    the Dispatcher holds, empty."""

    def __init__(self) -> None:
        self.epoch = self.errors = self.owner = 0
        self.recording = False
        self.manual_gc = self.in_gc = 0
        self.by_obj: Dict[int, Any] = {}
        self.by_tid: Dict[int, Any] = {}
        self.storages: Dict[int, Any] = {}
        self.at_ptr: Dict[int, Any] = {}
        self.op_meta: Dict[int, Any] = {}
        self.names: Dict[Any, str] = {}
        self.encoded: Dict[str, bytes] = {}
        self.node_stacks: Dict[int, int] = {}
        self.pending: List[Any] = []
        self.starts: List[int] = []
        self.maybe_gone: List[Any] = []
        self.held_elsewhere: List[Any] = []
        self.gc_dead: List[Any] = []
        self.lent_frames: Dict[int, int] = {}


class Tracker(_Recording, _Naming, _Storages, _Cycles, _Marks, _Walks, _FrameWalks):
    """Records tensors, uses, deaths and holders for ``vramtrace check``.

    Use through :func:`track`. Tensor deaths keep being recorded after the
    ``with`` block ends (a tensor that outlives the block still dies later);
    uses and holder walks stop.

    Ops are seen in the thread that entered the block, and in the autograd
    engine threads that run its backward passes (PyTorch hands the dispatch
    mode to them; other threads of the program are not seen); tracked
    tensors' deaths are recorded in any thread. A backward op on an engine
    thread (a CUDA device's backward) runs under the Python frames of the
    forward op it differentiates, found from its autograd node's sequence
    number, as functions named ``forward of FN`` at the forward's lines: the
    recorder's Python frames then show, for what it allocates, where the
    program made the forward op. A ``track()`` entered while another one records in the same
    thread (nested, or the same tracker re-entered) records nothing of its
    own: ``with`` gives the running tracker, which already sees every op,
    instead of declaring each tensor and storage a second time.

    An op's outputs are recorded (TENSOR_NEW, with the op's stack) only when
    the tracker next records anything - the next op, a mark or snapshot, a
    death, :meth:`tensor_id` - so that ``name(op(...), "label")`` right after
    the op names the tensor from its creation on, with no extra event. A name
    given later is a rename (vt_tensor_name, format 1.1: reports show the
    latest name). The creation event is the output's use; its time is that
    of the next recording, which changes no step (marks record first).
    """

    @_gc_hold.held
    def __init__(self, lib: Any = None, *, walk: bool = True, collect_cycles: bool = False,
                 max_depth: int = 8, max_breadth: int = 8, max_nodes: int = 4096,
                 stacks: bool = True, walk_fraction: Optional[float] = 0.25,
                 snapshot_walk_s: float = 5.0, threads: bool = False) -> None:
        self._lib = lib if lib is not None else get_library()
        self.walk = walk
        # Threads the program starts inside the block are tracked too
        # (_follow_new_threads); their hook while it is installed.
        self.threads = bool(threads)
        self._thread_hook: Any = None
        self._hook_before: Any = None
        # Where the tracker's own troubles are said: a RuntimeWarning (once
        # per kind) for a program that called track(); `vramtrace run
        # --track` sets its note(), so that an unmodified program's warnings
        # filters (-W error, pytest's) never see vramtrace's.
        self.say: Optional[Callable[[str], None]] = None
        # The walk's schedule: it may spend walk_fraction of the program's
        # own CPU time between marks (credit carried over, capped), more at
        # a snapshot; it runs from the tensors gone stale that no walk has
        # seen or whose references changed, else from all stale ones at
        # exponentially spaced marks (to retract released holders).
        self.walk_fraction = None if walk_fraction is None else float(walk_fraction)
        self.snapshot_walk_s = float(snapshot_walk_s)
        self.walks = 0               # walks made
        self.walk_cutoffs = 0        # walks their budget or max_nodes stopped early
        self._said_final_cutoff = False   # a snapshot's walk cut short was warned of
        self.walks_postponed = 0     # marks where a due walk had no budget
        self.base_drops_postponed = 0   # marks whose bases views keep waited for the budget
        self._bases_passed_at = time.perf_counter()   # their last heap pass (or the start)
        self.walk_seconds = 0.0      # CPU seconds spent at marks (sweeps and walks)
        self._credit = 0.0
        self._earned = 0.0           # all the credit the program's time gave
        # Walks of the running frames alone, at marks whose credit paid no
        # walk (_FrameWalks._walk_frames_only): made, their CPU seconds in all,
        # the last one's, and the tensors they started from.
        self.frame_walks = 0
        self._frames_spent = 0.0
        self._frames_cost = _FRAMES_ONLY_S
        self._frames_walked: Set[int] = set()
        # CPU seconds per heap pass, last measured; before the first walk,
        # what one costs in a process with torch loaded (10-40 ms for its
        # 150,000-300,000 objects), so that the first walk waits for that
        # much credit instead of overdrawing it by a whole pass.
        self._pass_cost = _FIRST_PASS_S
        # Heap passes the next walk at a mark waits for credit for, beyond
        # its least: those the last walk that ran out of its budget made,
        # and two more (_walks._walk_stale); 0 after a walk that was not.
        self._deepen = 0.0
        self._last_mark_end: Optional[Tuple[float, float]] = None   # (CPU, wall) clocks
        self._walked: Set[int] = set()   # tensor ids a walk started from
        # Tensor id -> its reference count when a walk that was not cut off
        # started from it: while the count stays the same, the holders that
        # walk found are still the ones (nothing took or dropped a reference).
        self._settled: Dict[int, int] = {}
        self.walks_skipped = 0       # due walks skipped: every stale tensor unchanged
        # Stale storages left out of a mark's walk because they rest as long
        # as they did before being used again (batches reused every k steps).
        self.resting_skipped = 0
        # Stale host storages left out of a mark's or tick's walk because the
        # program uses a device (walked at the snapshot: _Walks._stale_starts).
        self.host_deferred = 0
        self.partial_walks = 0       # walks from only the new or changed stale tensors
        self._declared_at = 0        # events recorded when a walk last declared all it found
        self._walked_at = 0          # events recorded when a walk last ran
        self.forced_walks = 0        # walks run past the credit: none in half a ring (_Walks)
        self._tensors_declared_at = 0   # events recorded when the tensors were last declared again
        self.declared_again = 0      # tensors declared again (_Marks._declare_tensors_again)
        self._busy_at_mark = 0.0     # _busy at the end of the last mark
        self._marks_since_walk = 0
        self._backoff = 1
        # What the loop carries from step to step and still uses (stale_storages'
        # `carried`) at the last walk, and the walks in a row it grew before
        # (_Walks._carried_grows)
        self._carried = 0
        self._carried_grew = 0
        self.collect_cycles = collect_cycles
        self.max_depth = max_depth
        self.max_breadth = max_breadth
        self.max_nodes = max_nodes
        self._life = StorageLife(_torch)
        _base_alone_count()   # measured here, outside any op (_Storages._drop_bases_only_views_hold)
        self._stacks = StackInterner(self._lib, _SKIP_FILES)
        self._stacks.enabled = stacks
        self._book = HolderBook(self._lib)
        # The books and the rules that change them, in C (_trackfast,
        # native/trackfast/; None where it is not built for this Python:
        # then nothing is recorded, and _why_not says why). Its containers
        # are bound below under the tracker's names, and its state (epoch,
        # errors, recording, ...) read and written through the properties
        # of _books_field.
        self._fast, self._why_not = _make_fast_path(self, getattr(self._lib, "raw", None),
                                                    stacks)
        self._read_window, self._record_pause = _ring_calls(self._fast, self._lib)
        books = self._books = self._fast if self._fast is not None else _NoBooks()
        self._by_obj: Dict[int, _TensorRec] = books.by_obj      # id(tensor) -> rec
        self._by_tid: Dict[int, _TensorRec] = books.by_tid      # recorded ones
        self._pending: List[_TensorRec] = books.pending         # outputs not recorded yet
        self._storages: Dict[int, _StorageRec] = books.storages
        self._starts: List[int] = books.starts                  # sorted ptrs of declared storages
        self._at_ptr: Dict[int, _StorageRec] = books.at_ptr     # declared external storages by ptr
        # Storages whose last tracked tensor died: the StorageImpl is released
        # only after the death callback returns, so it is checked at the next
        # recording point (the death's stack kept on the record, gone_stack)
        self._maybe_gone: List[_StorageRec] = books.maybe_gone
        # ... and those found still held then (autograd's saved tensors): a few
        # asked again at each recording point, in turn (settle() in
        # native/trackfast/storages.c), all of them at a mark or collection.
        self._held_elsewhere: List[_StorageRec] = books.held_elsewhere
        # id(op) -> (index of the argument its outputs view, -1: none; whether
        # it may give a tensor other memory: set_, resize_; the op itself)
        self._op_meta: Dict[int, Tuple[int, int, Any]] = books.op_meta
        # (id(op), output index, stack) -> name; ops in _op_meta keep their ids
        self._names: Dict[Tuple[int, int, int], str] = books.names
        self._encoded: Dict[str, bytes] = books.encoded   # tensor names, as the library takes them
        # Autograd node sequence number -> stack id of the forward op that made the node
        self._node_stacks: Dict[int, int] = books.node_stacks
        self._gc_dead: List[Tuple[int, int]] = books.gc_dead   # (tid, id(obj)) died in our collection
        # A program that makes no mark (an evaluation, inference: no
        # optimizer step marks it) gets a mark's work without a mark every
        # tick_s seconds of its ops (_Marks._tick), until it marks, and
        # again while its marks have gone quiet (_Marks._gone_quiet). (The C
        # path keeps its own copy, _fast.tick_s, set below, and its clock.)
        self.tick_s: Optional[float] = _TICK_S
        # Infinity once the program has marked (or with tick_s None).
        self._next_tick = 0.0 if self.tick_s else _NO_TICK
        # The events recorded when the block began: a block of PyTorch's
        # allocator handed out after it was made inside it (_made_site).
        self._began_at = 0
        # perf_counter() of the program's last marks: _Marks._gone_quiet
        self._marked_at: Deque[float] = collections.deque(maxlen=_QUIET_GAPS + 1)
        # id(parameter) -> (weakref, its name in a model): _param_name
        self._param_names: Dict[int, Tuple[Any, str]] = {}
        self.model_lookups = 0       # passes over the collector's objects for them
        # id(parameter) -> (weakref, its first-sight name), for those a
        # model named: _Naming._left_their_models
        self._first_sight: Dict[int, Tuple[Any, str]] = {}
        self._param_labels: Set[str] = set()   # the model names parameters were given
        # The models alive at the last lookup (_param_name, which rebuilds
        # both): id(model) -> (weak model, [(weak parameter or buffer, its
        # name for a buffer)]), and the model of each of their parameters
        # (_Marks._state_follows_models).
        self._model_state: Dict[int, Tuple[Any, List[Tuple[Any, str]]]] = {}
        self._model_of: Dict[int, int] = {}
        self._mode: Optional[_Mode] = None
        self._mode_refs = 0          # the mode's reference count before it was entered
        self._observer: Any = None   # the op observer (_trackobs) instead of the mode
        #: How ops were seen once the block was entered: "observer" (PyTorch's
        #: RecordFunction hook, vramtrace/_trackobs.py) or "dispatch mode".
        self.ops_seen_by = ""
        self._gc_holder = 0          # holder of the running automatic collection
        #: Tracked tensors that a garbage collection freed (held by a reference cycle).
        self.gc_freed = 0
        self._deferred: List["Tracker"] = []   # running trackers a nested enter gave
        # Stack id of a forward op -> the frames that replay it.
        self._forward_frames: Dict[int, Any] = {}
        # Stack id of a forward op -> its frames named "forward of", interned
        # (lent to engine threads by the op observer)
        self._lent_frames: Dict[int, int] = books.lent_frames
        # Storage key -> the tensor a walk recorded for a storage that only a
        # saved tensor in C++ keeps (_Walks._saved_tensor_of).
        self._saved_only: Dict[int, Any] = {}
        # Storage keys of stale storages kept without a tensor the books
        # know that a heap pass searched for Python tensors (_Walks._adopt_unseen)
        self._kept_searched: Set[int] = set()
        self.tensors_found = 0   # Python tensors no op showed, found on such storages
        if self._fast is not None:
            self._fast.tick_s = self.tick_s or 0.0
            # until the program marks, each backward pass's end is a step
            # of the tracker's books (_Marks._pass_ended)
            self._fast.pass_ticks = 1

    #: Marks (and ticks) seen.
    epoch = _books_field("epoch")
    #: Recordings that failed (each op still ran; the first one warned of).
    errors = _books_field("errors")
    _recording = _books_field("recording")   # ops are recorded now
    _marking = _books_field("marking")       # the thread doing a mark's work now, 0: none
    _owner = _books_field("owner")           # the thread that entered: it runs the forward ops
    _manual_gc = _books_field("manual_gc")   # the thread in our own cycle collection, 0: none
    _in_gc = _books_field("in_gc")           # the thread in a collection we did not start

    # -- context -----------------------------------------------------------
    @_gc_hold.held
    def __enter__(self) -> "Tracker":
        running = getattr(_tls, "tracker", None)
        if running is not None:
            self._deferred.append(running)
            return running
        if self._fast is None:
            # Nothing recorded; the block runs as without vramtrace.
            global _said_blind
            if not _said_blind:
                _said_blind = True
                self._warn(f"vramtrace.torch.track() records nothing: {self._why_not}", 2)
            return self
        _tls.tracker = self
        self._owner = _get_ident()
        self._observer = _trackobs.load() if _trackobs.wanted() else None
        if self._observer is not None:
            # Storages read in C++ from now on, also after __exit__ and
            # when another thread's tracker has the observer: Python's
            # data_ptr() would materialize a copy-on-write storage.
            self._life.read_with(self._observer.storage_now)
            self._fast.storage_reader = self._observer.storage_now_address
            self._fast.use_counter = self._observer.use_count_address
            # a mark's look at every live tensor's storage (_sweep) without a
            # Python call each; a 0-element host tensor (no memory, and on
            # the host whatever the program's default device: no CUDA
            # started), made before the observer is installed and out of
            # the program's modes' sight, tells whether the read is torch's
            try:
                with _torch._C.DisableTorchFunction(), _torch._C._DisableTorchDispatch():
                    # (its _cdata read in there too: a tensor's property is
                    # a torch function a mode sees)
                    self._fast.read_storages_with(self._observer.storage_key_address,
                                                  _torch.empty(0, device="cpu"))
            except Exception:  # noqa: BLE001 - torch._C._storage_id is asked instead
                pass
            lend = self._lib.raw("vt_thread_python_stack")   # _fast: the real library
            try:
                self._observer.install(self._fast.observed, self._fast.observed_engine,
                                       _trackobs.op_for, self._engine_frames,
                                       ctypes.cast(lend, ctypes.c_void_p).value if lend else 0,
                                       getattr(_fast_path._trackfast, "GC_HOLD_API", 0),
                                       self._fast.lent_reader, self._fast.lent_table,
                                       self._fast.marking_address,
                                       engine_uses=self._fast.engine_uses_address,
                                       dispatcher=id(self._fast))
                self._fast.lend = 1   # each forward op's frames to lend, ready
                # what it reads of each tensor in C++, used with its weak maker
                self._fast.weak_maker = self._observer.make_weak_address
                # the engine threads' ops it holds back, recorded at each flush
                self._fast.engine_drainer = self._observer.drain_address
            except RuntimeError:   # another thread's tracker has it: this one, the mode
                self._observer = None
        if self._observer is None:
            self._mode = _Mode(self)
            self._mode_refs = sys.getrefcount(self._mode)
            self._mode.__enter__()
        self.ops_seen_by = "observer" if self._observer is not None else "dispatch mode"
        self._began_at = (self._trace_window() or (0, 0))[0]
        self._recording = True
        # The program's time before its first mark is its own too: the
        # walks' credit counts from here (a short job's first marks come
        # after its setup, and their walks would otherwise wait for credit
        # that a few quick steps never give).
        self._last_mark_end = (time.process_time(), time.perf_counter())
        self._busy_at_mark = self._busy()
        _active.append(self)
        if self.threads:
            self._follow_new_threads()
        _vt.add_mark_hook(self._on_mark)
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        return self

    @_gc_hold.held
    def __exit__(self, *exc: Any) -> None:
        if self._deferred:   # a nested enter: the running tracker goes on
            self._deferred.pop()
            return
        if self._fast is None:
            return
        if getattr(_tls, "tracker", None) is self:
            _tls.tracker = None
        self._fast.flush()
        self._fast.settle()
        self._recording = False
        self._stop_following_new_threads()
        _vt.remove_mark_hook(self._on_mark)
        if self in _active:
            _active.remove(self)
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(*exc)
            _let_engine_threads_go(mode, self._mode_refs)
            del mode
        if self._observer is not None:
            self._observer.uninstall()
            self._fast.lend = 0
            self._fast.weak_maker = 0
            self._fast.engine_drainer = 0
            self._observer = None

    def _follow_new_threads(self) -> None:
        """Track every thread the program starts (``threading``) from now on
        (an evaluation or EMA thread, a prefetcher, PyTorch's pin-memory
        thread): threading sets its profile hook in each new thread before
        the thread's run(); ours takes the first event, hands the thread to
        this tracker and puts back the hook the program had set (none,
        mostly), so the thread runs as it would."""
        previous = threading.getprofile()

        def join(frame: Any, event: str, arg: Any) -> Any:
            sys.setprofile(previous)
            try:
                self._follow_this_thread()
            except Exception:  # noqa: BLE001 - the thread runs untracked, unchanged
                pass
            if previous is not None:
                return previous(frame, event, arg)
            return None

        self._hook_before, self._thread_hook = previous, join
        threading.setprofile(join)

    def _stop_following_new_threads(self) -> None:
        """Threads started from now on are not tracked: the program's own
        hook back, unless the program has set another since."""
        if self._thread_hook is not None and threading.getprofile() is self._thread_hook:
            threading.setprofile(self._hook_before)
        self._thread_hook = self._hook_before = None

    def _follow_this_thread(self) -> bool:
        """Record the ops of the calling thread (a thread the program
        started after the block was entered) as this block's: its forward
        ops with its own lines, its backward through the engine threads, as
        the entering thread's (``vramtrace run --track`` follows every
        thread so). Only through the op observer: a dispatch mode is one
        thread's. False when not followed."""
        if self._observer is None or self._fast is None or not self._observer.join():
            return False
        _tls.tracker = self
        return True

    @_gc_hold.held
    def close(self) -> None:
        """Stop recording deaths too (tensors still alive are left as they are)."""
        try:
            gc.callbacks.remove(self._on_gc)
        except ValueError:
            pass
        if self._fast is not None:
            self._fast.flush()
        for rec in list(self._by_tid.values()):
            rec.ref = None
        self._by_tid.clear()
        self._by_obj.clear()

    @property
    def ops(self) -> int:
        """Ops recorded so far."""
        return self._fast.ops if self._fast is not None else 0

    def _busy(self) -> float:
        """Seconds spent recording ops and deaths (the walk schedule's input)."""
        return self._fast.busy if self._fast is not None else 0.0

    def storages_now(self) -> Dict[int, Tuple[int, int, int]]:
        """The tracked storages alive now, by identity: (address, bytes,
        device; -1 for host memory). Outputs held back are recorded and the
        storages whose last tensor died are settled first."""
        if self._fast is None:
            return {}
        self._fast.flush()
        self._fast.settle()
        return {k: (s.ptr, s.nbytes, s.device) for k, s in self._storages.items()}

    def grads_on(self, keys: Set[int]) -> Set[int]:
        """The storages (keys as storages_now's) of the ``.grad`` of every
        parameter whose storage is among ``keys``: a parameter's state,
        replaced by the next backward, freed by ``zero_grad``."""
        storage_id = getattr(_torch._C, "_storage_id", None)
        out: Set[int] = set()
        for key in keys:
            srec = self._storages.get(key)
            for rec in list(srec.tids) if srec is not None else ():
                t = rec.ref() if rec.ref is not None else None
                g = t._grad if isinstance(t, _torch.nn.Parameter) else None
                if g is not None:
                    # _storage_id: no Python storage object made (see _storage_life)
                    out.add(int(storage_id(g)) if storage_id is not None
                            else g.untyped_storage()._cdata)
                del t, g
        return out
