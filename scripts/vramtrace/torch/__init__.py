"""PyTorch helpers: the pluggable allocator, and tensor lifetime tracking.

``use_allocator()`` makes PyTorch allocate CUDA memory through libvramtrace
(``torch.cuda.memory.CUDAPluggableAllocator``, PyTorch >= 2.0), so that every
allocation is traced and can be snapshotted.

``track()`` records, for the reference-graph checker, what the allocator
alone cannot see::

    import vramtrace, vramtrace.torch as vtt
    with vtt.track():
        for step in range(n):
            vtt.mark(f"step {step}")
            loss = model(batch).sum(); loss.backward()
        vramtrace.snapshot("train.vtsnap")
    # then: vramtrace check train.vtsnap

- every tensor an op makes or reads, with its storage and the view it came
  from, named after the op ("aten.mm out[0]") unless :func:`name` names it;
- every use (each op's inputs and outputs) with the Python stack of the op;
- each tensor's death, and the storage's release when its last tensor dies,
  with the Python stack where that happened (CPU storages are declared as
  external storages; CUDA tensors bind to the allocations the allocator made);
- at each :func:`mark` and snapshot: what still holds the storages that were
  not used since the previous mark (``gc.get_referrers``: list indexes, dict
  keys, attributes, closure cells, frame locals, autograd saved tensors), and
  which tensors only a garbage collection of a reference cycle freed.

The package's files, one concept each: ``_tracker.py`` (the Tracker's
state, entering and leaving ``track()``), ``_recording.py`` (the dispatch
mode, names of what ops make, engine threads' frames), ``_storages.py``
(storages checked, swept, moved, twinned), ``_marks.py`` (what a mark does),
``_walks.py`` (holder walks), ``_autograd_graph.py`` (the autograd graph
as the walks read it: node hooks, saved tensors, chains), ``_frame_walks.py`` (walks of the running
frames alone, when the credit pays no walk), ``_cycles.py`` (what garbage
collections freed), ``_naming.py`` (tensor and parameter names), ``_records.py`` (the
records' names), ``_registry.py`` (running trackers, pending names),
``_torch_facts.py`` (what is read of PyTorch), ``_fast_path.py`` (loading
``_trackfast``, the C extension whose rules change the books: every op's
uses and outputs, first sights, deaths, storages declared and ended, each
written once there; ``track()`` records nothing without it),
``allocator.py`` (``use_allocator()``).
The Tracker is one state machine across them (its mixins share its
state); the parts that stand alone live beside the package:
``_referrers.py`` (the holder walk; ``_hop_labels.py`` names its hops),
``_holders.py``, ``_storage_life.py``, ``_stacks.py``.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any


try:   # this message, before the submodules import torch themselves
    import torch
except ImportError as _exc:  # pragma: no cover - only without torch
    raise ImportError(f"vramtrace.torch needs PyTorch: {_exc}") from _exc
del torch

import vramtrace as _vt
from .._lib import get_library
from .. import _gc_hold
from ._fast_path import _trackfast_for
from ._registry import _active, _pending_names
from ._tracker import Tracker
from ._cycles import CYCLE_HOLDER
from .allocator import use_allocator


__all__ = ["use_allocator", "track", "Tracker", "name", "mark", "CYCLE_HOLDER"]


# --------------------------------------------------------------------------
# Module-level helpers
# --------------------------------------------------------------------------

def track(lib: Any = None, **options: Any) -> Tracker:
    """A context manager that records tensor lifetimes for ``vramtrace check``.

    Options: ``walk`` (record holders at marks, default True),
    ``collect_cycles`` (at each mark and snapshot, collect garbage cycles and
    record what held each tracked tensor they freed under a "reference cycle
    collected by gc" holder; default False, because freeing cycles at every
    mark changes when the program frees memory -- without it such cycles are
    reported as the cycles they are, and a collection the program runs
    itself still records the holder), ``max_depth``/``max_breadth``/``max_nodes`` (bounds
    of the referrer walk: its depth, the referrers it follows per object -- a
    module's namespace is followed past it --, the holders it finds in all),
    ``stacks`` (record Python stacks of uses),
    ``walk_fraction`` (the walk may take this fraction of the program's own
    CPU time between marks -- the time not spent recording ops and deaths --,
    default 0.25: all of a mark's work is paid from it, so the marks add at
    most a quarter of the program's own time; None: no time budget),
    ``snapshot_walk_s`` (the budget of the walk at a snapshot, default 5 s),
    ``threads`` (also track the threads the program starts with ``threading``
    inside the block, their backward with them, through the op observer;
    default False: the thread that entered and its backward; ``vramtrace run
    --track`` sets it).
    A walk cut short by its budget or max_nodes is counted in ``Tracker.walk_cutoffs``;
    what it did not reach is looked for at later marks. A snapshot's walk cut
    short is warned about (once): the report's chains may then be partial.

    A mark walks from the tensors whose storage went unused since the
    previous mark, except a storage resting no longer than it did before
    being used again (a batch reused every k steps: ``resting_skipped``);
    only the ones no walk has seen or whose references changed are walked
    (``partial_walks``), all of them at exponentially spaced marks and at a
    snapshot; a mark whose stale tensors are all unchanged since a complete
    walk skips it (``walks_skipped``).
    """
    # Loading the library and _trackfast and building the tracker are
    # vramtrace's own work: no collection starts meanwhile, and the
    # collector's count is put back as it was (gc_schedule.c; the hold
    # itself comes with _trackfast).
    before, enabled = gc.get_count()[0], gc.isenabled()
    gc.disable()
    try:
        lib = lib if lib is not None else get_library()
        if getattr(lib, "raw", None) is not None:
            _trackfast_for(lib)
        tracker = Tracker(lib, **options)
    finally:
        if enabled:
            gc.enable()
        _gc_hold.hold()   # its token (the count now) is not wanted
        _gc_hold.release(before)
    return tracker


def name(t: Any, label: str) -> Any:
    """Name tensor ``t`` for reports ("fc2 out"); returns ``t``.

    Right after ``t`` is made the name replaces the op-derived one; later, it
    renames the recorded tensor (reports show its latest name). A tensor no
    tracker has seen yet takes the name when first seen."""
    if not isinstance(label, str):
        raise TypeError(f"name(): label must be str, not {type(label).__name__}")
    for tr in _active:
        if tr._rename(t, label):
            return t
    try:
        key = id(t)
        ref = weakref.ref(t, lambda _r, k=key: _pending_names.pop(k, None))
    except TypeError as exc:
        raise TypeError(f"name(): {type(t).__name__} cannot be named: {exc}") from exc
    _pending_names[key] = (ref, label)
    return t


def mark(label: str) -> None:
    """:func:`vramtrace.mark`: a labelled point (e.g. "step 3"); every active
    tracker records there what holds the tensors gone stale."""
    _vt.mark(label)


# Under `vramtrace run --track`, a program that imports vramtrace.torch before
# torch has its tracking start here, now that track() exists.
from .. import _autorun as _ar  # noqa: E402
_ar.torch_package_ready()
del _ar
