"""The cyclic collector's count held while the tracker works.

Python runs an automatic collection when the count of container objects made
less those freed passes a threshold. The tracker's own objects must not
count, or each collection comes after fewer of the program's allocations and
a reference cycle the program dropped is freed at another step than without
vramtrace (scripts/vramtrace/native/trackfast/gc_schedule.c says how). Until _trackfast,
built with CPython's internal headers, is loaded (:func:`use`) these are
no-ops (track() records nothing without it).

Callers reach them as attributes of this module (``_gc_hold.hold()``): they
are replaced when _trackfast is loaded.
"""
from __future__ import annotations

import functools
from typing import Any, Callable


def hold() -> int:
    """Hold the count; give the token to :func:`release`."""
    return 0


def release(_token: int) -> None:
    """The count as :func:`hold` found it (the free lists too)."""
    return None


def count() -> int:
    """The count now (inside a hold: how far the tracker's work moved it)."""
    return 0


def as_program(_n: int) -> None:
    """Inside a hold: ``n`` objects made are the program's (CPython or
    PyTorch keep them for the program's frames and tensors)."""
    return None


def program_read() -> None:
    """Inside a hold: a walk of the program's objects begins. The frame
    objects it makes, which CPython keeps while their functions run, are
    the program's (native/trackfast/gc_reads.c)."""
    return None


def use(mod: Any) -> None:
    """The loaded _trackfast's, where it can hold the count."""
    global hold, release, count, as_program, program_read
    if getattr(mod, "GC_HELD", 0):
        hold, release = mod.gc_hold, mod.gc_release
        count, as_program = mod.gc_held_count, mod.gc_count_as_program
        program_read = mod.gc_program_read


def held(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` run with the count held (an entry into the tracker from
    the program: a mark, a collection's callback, a death, an op)."""
    @functools.wraps(method)
    def run_held(*args: Any, **kwargs: Any) -> Any:
        token = hold()
        try:
            return method(*args, **kwargs)
        finally:
            release(token)
    return run_held
