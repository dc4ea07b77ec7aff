"""A stand-in for libvramtrace that records the calls, for unit tests of the
Python side without the C library."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

# The library's C entry points that track()'s C path (_trackfast) calls, as
# ctypes prototypes: raw() hands it callbacks into the methods below, so the
# fake sees what the C path records exactly as the real library would.
_RAW = {
    "vt_tensor_use_stack": (None, ctypes.c_uint64, ctypes.c_uint32),
    "vt_tensor_new_stack": (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64,
                            ctypes.c_char_p, ctypes.c_uint32),
    "vt_tensor_drop": (None, ctypes.c_uint64),
    "vt_storage_external_stack": (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_uint32),
    "vt_storage_external_free_stack": (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32),
    "vt_tensor_name": (ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p),
    "vt_tensor_again": (ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64),
}


class FakeLib:
    """Same methods as vramtrace._lib.Library; every call is appended to
    ``events`` as a tuple (kind, ...)."""

    # Where the real library is: track() finds its C extension, built
    # beside it, through the library's path.
    path = os.environ.get("VRAMTRACE_LIB") or "<fake>"

    def __init__(self) -> None:
        self.events: List[Tuple[Any, ...]] = []
        self.requests: List[bool] = []   # snapshot_requested(on), in order
        self.pauses: List[int] = []      # paused(ns), in order
        self._next = 0
        self.stacks: Dict[int, Sequence[Tuple[str, str, int]]] = {}
        self.names: Dict[int, str] = {}
        self.storage_stacks: List[Tuple[str, int, Optional[int]]] = []
        self.gc_holders: Set[int] = set()   # holders made as gc collections
        self._raw: Dict[str, Any] = {}      # raw(): the callbacks, kept alive
        # trace_window(): (events recorded, the ring's room), as a test sets
        # it; None: a library that cannot say
        self.window: Optional[Tuple[int, int]] = None

    def raw(self, name: str) -> Any:
        """A C-callable stand-in for the library's function ``name`` (None
        for one the fake does not have, as the real library's raw() for a
        missing symbol)."""
        proto = _RAW.get(name)
        if proto is None:
            return None
        fn = self._raw.get(name)
        if fn is None:
            calls = {
                "vt_tensor_use_stack": lambda tid, stack: self.tensor_use(tid, stack),
                "vt_tensor_new_stack": lambda ptr, nbytes, base, name, stack: self.tensor_new(
                    ptr or 0, nbytes, base, name.decode("utf-8", "replace"), stack),
                "vt_tensor_drop": lambda tid: self.tensor_drop(tid),
                "vt_storage_external_stack": lambda ptr, nbytes, device, stack:
                    self.storage_external(ptr or 0, nbytes, device, stack) or 0,
                "vt_storage_external_free_stack": lambda ptr, stack: (
                    self.storage_external_free(ptr or 0, stack), 0)[1],
                "vt_tensor_name": lambda tid, name: (
                    self.tensor_name(tid, name.decode("utf-8", "replace")), 0)[1],
                "vt_tensor_again": lambda tid, ptr, nbytes, base, name, stack, rest: (
                    self.tensor_again(tid, ptr or 0, nbytes, base,
                                      name.decode("utf-8", "replace"), stack, rest), 0)[1],
            }
            fn = self._raw[name] = ctypes.CFUNCTYPE(*proto)(calls[name])
        return fn

    def _id(self) -> int:
        self._next += 1
        return self._next

    def version(self) -> str:
        return "0.0.0-fake"

    def mark(self, label: str) -> None:
        self.events.append(("mark", label))

    def snapshot(self, path: str) -> None:
        self.events.append(("snapshot", path))

    can_rename = True   # as the real library's (vt_tensor_name, format 1.1)

    def trace_window(self) -> Optional[Tuple[int, int]]:
        return self.window

    def snapshot_requested(self, on: bool = True) -> None:
        self.requests.append(on)

    def paused(self, ns: int) -> None:
        self.pauses.append(ns)

    def record_stream(self, ptr: int, stream: int) -> None:
        self.events.append(("record_stream", ptr, stream))

    def get_stats(self, device: int) -> Dict[str, Any]:
        return {"num_ooms": 0}

    # stack: an interned stack id (0: none), None: "capture natively".
    def tensor_new(self, ptr: int, nbytes: int, base: int, name: str,
                   stack: Optional[int] = None) -> int:
        tid = self._id()
        self.names[tid] = name
        self.events.append(("tensor_new", tid, ptr, nbytes, base, name, stack))
        return tid

    def tensor_again(self, tid: int, ptr: int, nbytes: int, base: int, name: str,
                     stack: int, rest: int) -> None:
        self.events.append(("again", tid, ptr, nbytes, base, name, stack, rest))

    def tensor_use(self, tid: int, stack: Optional[int] = None) -> None:
        self.events.append(("use", tid, stack))

    def tensor_drop(self, tid: int) -> None:
        self.events.append(("drop", tid))

    def tensor_name(self, tid: int, name: str) -> None:
        self.names[tid] = name
        self.events.append(("tensor_name", tid, name))

    def storage_external(self, ptr: int, nbytes: int, device: int,
                         stack: Optional[int] = None) -> None:
        self.events.append(("storage", ptr, nbytes, device))
        self.storage_stacks.append(("storage", ptr, stack))

    def storage_external_free(self, ptr: int, stack: Optional[int] = None) -> None:
        self.events.append(("storage_free", ptr))
        self.storage_stacks.append(("storage_free", ptr, stack))

    def holder_new(self, name: str, gc_collection: bool = False) -> int:
        hid = self._id()
        if gc_collection:
            self.gc_holders.add(hid)
        self.names[hid] = name
        self.events.append(("holder", hid, name))
        return hid

    def ref(self, src: int, dst: int, label: str) -> None:
        self.events.append(("ref", src, dst, label))

    def unref(self, src: int, dst: int) -> None:
        self.events.append(("unref", src, dst))

    def intern_stack(self, frames: Sequence[Tuple[str, str, int]]) -> int:
        sid = len(self.stacks) + 1
        self.stacks[sid] = list(frames)
        return sid

    # -- helpers for assertions -------------------------------------------
    def of(self, kind: str) -> List[Tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]

    def live_refs(self) -> Dict[Tuple[int, int], str]:
        refs: Dict[Tuple[int, int], str] = {}
        for e in self.events:
            if e[0] == "ref":
                refs[(e[1], e[2])] = e[3]
            elif e[0] == "unref":
                refs.pop((e[1], e[2]), None)
        return refs

    def paths_to(self, tid: int, max_len: int = 12) -> List[str]:
        """Every chain of refs ending at ``tid``, printed root first."""
        refs = [(e[1], e[2], e[3]) for e in self.events if e[0] == "ref"]
        out: List[str] = []

        def walk(node: int, suffix: str, seen: frozenset) -> None:
            ins = [(s, lb) for s, d, lb in refs if d == node and s not in seen]
            if not ins or len(seen) > max_len:
                out.append(f"{self.names.get(node, '?')}{suffix}")
                return
            for s, lb in ins:
                walk(s, f" {lb} -> {self.names.get(node, '?')}{suffix}"
                     if suffix else f" {lb} -> {self.names.get(node, '?')}", seen | {s})

        walk(tid, "", frozenset({tid}))
        return out
