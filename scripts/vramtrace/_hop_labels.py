"""How a retention chain names what it passes through: each holding object
(``holder_name``: a module, a function, a returned frame, a suspended
generator, an lru_cache by the function it caches) and each hop from a
holder to what it holds (an attribute or slot, a container's index or key, a
frame's local, a bounded lru_cache's key or result, an itertools iterator's
field or a builtin iterator's, a thread-local's attribute). The walk
(``_referrers``) asks for these labels; nothing here runs the program's
code: keys are formatted only where their repr is plain, and objects are
compared by identity, never with ``==``.
"""

from __future__ import annotations

import _thread
import functools
import gc
import itertools
import os
import sys
import types
import weakref
from typing import Any, List, Optional, Tuple

_CO_OPTIMIZED = 0x0001   # inspect.CO_OPTIMIZED: a function's fast locals

_MAX_LABEL = 60


# Keys shown by value: their repr runs no user code and reads no tensor.
_PLAIN_KEYS = (str, bytes, int, float, bool, type(None))

# torch's own value types whose repr is C code of torch's (no program code,
# no tensor read): a device or a dtype in a cache's key (an lru_cache keyed
# by (length, device) is how masks and rotary tables are cached).
_TORCH_PLAIN_KEYS = ("device", "dtype")


def _plain(value: Any) -> bool:
    t = type(value)
    return t in _PLAIN_KEYS or (t.__module__ == "torch" and t.__name__ in _TORCH_PLAIN_KEYS)

# functools.lru_cache's (and functools.cache's) wrapper: its cache is a dict
# it holds in C, reachable by no attribute.
_LRU_WRAPPER = getattr(functools, "_lru_cache_wrapper", None)
_CACHE = "'s cache"   # its label: "lru_cache f's cache[(700, device(...))]" once folded


def _lru_cache_labels(wrapper: Any, obj: Any) -> List[str]:
    """``obj`` in an lru_cache wrapper's C fields: its cache's dict (``'s
    cache``, folded with the dict's items into ``'s cache[key]``), or, in a
    bounded cache (``maxsize=N``, the decorator's default of 128), a key or
    a result. A bounded cache keeps its entries in a linked list of its own,
    its dict mapping each key to a link that Python cannot read; the
    wrapper's traverse (CPython's Modules/_functoolsmodule.c,
    lru_cache_tp_traverse) visits each link's key and then its result, then
    the cache's dict, ..., its own ``__dict__`` last: so among its referents
    a result follows its key, and the cache is the last dict but the
    ``__dict__`` (a result that is a dict is not taken for it). Keys are told
    from results by identity with the dict's keys: comparing them would run
    the program's ``__eq__`` (a tensor's is an op)."""
    refs = gc.get_referents(wrapper)
    try:
        own = object.__getattribute__(wrapper, "__dict__")
    except Exception:
        own = None
    dicts = [x for x in refs if type(x) is dict and x is not own]
    if not dicts:
        return []
    cache = dicts[-1]
    if obj is cache:
        return [_CACHE]
    keys = {id(k) for k in list(cache)}
    out = []
    for i, x in enumerate(refs):
        if x is not obj:
            continue
        if id(x) in keys:
            out.append(f"{_CACHE}.key {_short(x)}")   # as a dict's key: "dict.key (...)"
        elif i > 0 and id(refs[i - 1]) in keys:
            out.append(f"{_CACHE}[{_short(refs[i - 1])}]")
    return out


# threading.local (CPython's _thread._local, Modules/_threadmodule.c of 3.11) keeps each
# thread's attributes in a dict of their own, a value of a dict the local
# holds, keyed by a weak reference to a dummy of that thread's whose
# callback is bound to a weak reference to the local. The hop from that
# dict to a thread's attributes is the local's __dict__: the chain reads
# `threading.local.masks`, as an object's attribute, not `_local(referent) →
# dict[<ReferenceType>] → dict['masks']`. (Where a Python keeps them
# otherwise, thread_local_owner finds no local and the chain reads as before.)
_THREAD_LOCAL = getattr(_thread, "_local", None)


def thread_local_owner(container: dict, child: Any) -> Optional[Any]:
    """The threading.local whose per-thread attributes ``child`` is, where
    ``container`` is that local's dict of them; else None."""
    if _THREAD_LOCAL is None or type(child) is not dict or not container:
        return None
    first = next(iter(container))
    if type(first) is not weakref.ref or type(first()).__name__ != "_localdummy":
        return None
    for key, value in container.items():
        if value is child:
            owner = getattr(getattr(key, "__callback__", None), "__self__", None)
            owner = owner() if type(owner) is weakref.ref else None
            return owner if isinstance(owner, _THREAD_LOCAL) else None
    return None


# itertools' iterators that keep what they have produced in C fields no
# attribute reaches: cycle saves every item of its first pass (a DataLoader
# cycled for an endless run keeps every batch of an epoch: pytorch/pytorch#23900,
# bytedance/UNO#64), and tee keeps what one copy has read and another has not,
# in linked blocks of values (Modules/itertoolsmodule.c).
_TEE = getattr(itertools, "_tee", None)
_TEE_DATA = getattr(itertools, "_tee_dataobject", None)


def _itertools_labels(holder: Any, obj: Any) -> List[str]:
    """``obj``'s field in an itertools cycle or tee, named as a slot is
    (``cycle.saved``, ``_tee_dataobject.values[3]``); [] for other holders."""
    t = type(holder)
    if t is itertools.cycle:
        # its fields: the iterator and the list of what it has saved
        return [".saved" if type(obj) is list else ".it"]
    if _TEE is not None and t is _TEE:
        return [".dataobj"] if type(obj) is _TEE_DATA else []
    if _TEE_DATA is None or t is not _TEE_DATA:
        return []
    if type(obj) is _TEE_DATA:
        return [".nextlink"]
    # the iterator, then the values read so far, then the next block: a
    # value's index is its place after the iterator
    refs = [x for x in gc.get_referents(holder) if x is not t and type(x) is not _TEE_DATA]
    return [".it" if i == 0 else f".values[{i - 1}]" for i, x in enumerate(refs) if x is obj]


# The builtin iterators' fields, named as slots are: what a list, tuple,
# set or dict iterator iterates (a consumed batch stays in the list an
# iterator walks until the iterator goes: `Prefetch.it → list_iterator.seq
# → list[*]`), and what enumerate, zip, map and filter hold.
_SEQ_ITERATORS = {type(iter(x)): label for x, label in (
    ([], ".seq"), ((), ".seq"), (reversed([]), ".seq"), (set(), ".set"),
    ({}, ".dict"), ({}.values(), ".dict"), ({}.items(), ".dict"))}
_SEQ_ITERATORS.update({type(reversed(x)): ".dict" for x in ({}, {}.values(), {}.items())})


def _iterator_labels(holder: Any, obj: Any) -> List[str]:
    """``obj``'s field in a builtin iterator (``list_iterator.seq``,
    ``zip.iterators``, ``map.func``); [] for other holders, or where the
    iterator does not hold it."""
    t = type(holder)
    label = _SEQ_ITERATORS.get(t)
    if label is None and t not in (enumerate, zip, map, filter):
        return []
    if not any(x is obj for x in gc.get_referents(holder)):
        return []
    if label is not None:
        return [label]
    # (zip and enumerate keep the tuple they last yielded, to reuse it: it
    # holds the last items)
    if t is enumerate:
        return [".last" if type(obj) is tuple else ".iterator"]
    if t is zip:   # its iterators: the tuple __reduce__ gives back
        return [".iterators" if holder.__reduce__()[1] is obj else ".last"]
    if t is map:
        return [".iterators" if type(obj) is tuple else ".func"]
    return [".func" if callable(obj) and not hasattr(obj, "__next__") else ".iterator"]


def _short(value: Any) -> str:
    """A dict key as a label. Only plain values are formatted: formatting
    anything else runs the program's code (a tensor's repr is thousands of
    ops), which the observer must never do."""
    if _plain(value):
        text = repr(value)
    elif type(value) is tuple and len(value) <= 4:
        # a cache's key: (self, n, device) reads "(<Attn>, 700, device(...))"
        parts = [repr(v) if _plain(v) else f"<{type(v).__name__}>" for v in value]
        text = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_LABEL else text[:_MAX_LABEL - 3] + "..."


def holder_name(obj: Any) -> str:
    """How a holding object is named in a retention path."""
    if isinstance(obj, types.FunctionType):
        if obj.__name__ == "<lambda>":
            # Lambdas share one name: the code says where it was written.
            co = obj.__code__
            return f"function <lambda at {os.path.basename(co.co_filename)}:{co.co_firstlineno}>"
        return f"function {obj.__name__}"
    if isinstance(obj, types.MethodType):
        return f"method {getattr(obj.__func__, '__name__', '?')}"
    if isinstance(obj, types.ModuleType):
        # A child multiprocessing spawned (torch.multiprocessing, DataLoader
        # workers under spawn) runs the program's script as __mp_main__, the
        # module it also puts in sys.modules as __main__: named as the
        # parent's chains name it, the user's __main__.
        name = obj.__name__
        return f"module {'__main__' if name == '__mp_main__' else name}"
    if isinstance(obj, type):
        return f"class {obj.__name__}"
    if _LRU_WRAPPER is not None and type(obj) is _LRU_WRAPPER:
        # named after the function it caches (functools.update_wrapper's
        # __name__, in the wrapper's own __dict__: no program code runs)
        try:
            name = object.__getattribute__(obj, "__dict__").get("__name__")
        except Exception:
            name = None
        return f"lru_cache {name}" if isinstance(name, str) else "lru_cache"
    if _THREAD_LOCAL is not None and type(obj) is _THREAD_LOCAL:
        return "threading.local"   # (its C type's name is _local; a subclass's is its own)
    if isinstance(obj, types.FrameType):
        # A frame that has returned, kept by a traceback (an exception the
        # program stored) or a generator: where it stopped.
        co = obj.f_code
        return f"frame of {co.co_name} ({os.path.basename(co.co_filename)}:{obj.f_lineno})"
    if isinstance(obj, _SUSPENDED):
        # a generator (coroutine) named by its function and where it waits
        code, frame = _suspended_code_and_frame(obj)
        where = (f" ({os.path.basename(code.co_filename)}:{frame.f_lineno})"
                 if frame is not None else "")
        return f"{type(obj).__name__} {code.co_name}{where}"
    return type(obj).__name__


# A generator, coroutine or async generator: since Python 3.11 its frame lives
# inside it, so the collector reports the generator itself, not a frame, as
# what refers to its locals' values.
_SUSPENDED = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


def _suspended_code_and_frame(gen: Any) -> Tuple[types.CodeType, Optional[types.FrameType]]:
    """A generator's (coroutine's) code and frame (None once it has finished)."""
    if isinstance(gen, types.GeneratorType):
        return gen.gi_code, gen.gi_frame
    if isinstance(gen, types.CoroutineType):
        return gen.cr_code, gen.cr_frame
    return gen.ag_code, gen.ag_frame


_MEMBER = types.MemberDescriptorType

# type -> its member descriptors, (name, descriptor), the whole MRO's
_members: "weakref.WeakKeyDictionary[type, Tuple[Tuple[str, Any], ...]]" = \
    weakref.WeakKeyDictionary()


def _members_of(cls: type) -> Tuple[Tuple[str, Any], ...]:
    """The member descriptors of instances of ``cls``: a class's
    ``__slots__`` and a C type's fields (functools.partial's ``func``,
    ``args`` and ``keywords``). Reading one reads the object's field and runs
    no code of the program (a property would: never read)."""
    try:
        return _members[cls]
    except (KeyError, TypeError):
        pass
    found = tuple((name, d) for c in cls.__mro__ for name, d in list(vars(c).items())
                  if type(d) is _MEMBER and not name.startswith("__"))
    try:
        _members[cls] = found
    except TypeError:   # a type that takes no weak reference: not cached
        pass
    return found


def _attr_labels(owner: Any, child: Any) -> List[str]:
    """Attribute names of ``owner`` (instance dict, slots or a C type's
    fields) that hold ``child``."""
    labels: List[str] = []
    try:
        d = object.__getattribute__(owner, "__dict__")
    except Exception:
        d = None
    if isinstance(d, dict):
        labels.extend(f".{k}" for k, v in list(d.items()) if v is child)
    for name, member in _members_of(type(owner)):
        try:
            if member.__get__(owner, type(owner)) is child:
                labels.append(f".{name}")
        except Exception:   # an empty slot
            pass
    return labels


# A tensor's references that live in C++ (no __dict__ entry): the hooks
# registered on it. Read with getattr, which has no side effect for these
# (unlike .grad of a non-leaf, which warns).
_TENSOR_HIDDEN_ATTRS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def _tensor_attr_labels(owner: Any, child: Any) -> List[str]:
    """The C++-held attributes of a torch tensor ``owner`` that hold ``child``."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    if tensor is None or not issubclass(type(owner), tensor):
        return []
    labels = []
    for name in _TENSOR_HIDDEN_ATTRS:
        try:
            if getattr(owner, name, None) is child:
                labels.append(f".{name}")
        except Exception:
            pass
    return labels


def _frame_labels(frame: types.FrameType, child: Any) -> List[str]:
    """The locals of a frame that has returned (kept by a traceback or a
    generator) that hold ``child``: ``local 'x'``; where ``child`` is the
    cell of a local a nested function reads (`acts` of a context manager
    whose hook appends to it), that local (its value, f_locals shows, is
    the cell's contents; the walker folds the cell: _Walker.fold). Reading
    them fills the frame's locals dict, which is emptied again: the frame
    itself keeps the values, no more and no longer than before."""
    labels: List[str] = []
    try:
        loc = frame.f_locals
    except Exception:
        return labels
    try:
        labels.extend(f"local '{k}'" for k, v in list(loc.items()) if v is child)
        if type(child) is types.CellType:
            try:
                contents = child.cell_contents
            except ValueError:   # (empty)
                pass
            else:
                code = frame.f_code
                labels.extend(f"local '{k}'" for k in code.co_cellvars + code.co_freevars
                              if k in loc and loc[k] is contents)
        if frame.f_back is child:
            labels.append(".f_back")
    finally:
        if frame.f_code.co_flags & _CO_OPTIMIZED and frame.f_trace is None \
                and sys.gettrace() is None:
            loc.clear()
        del loc
    return labels


def _container_labels(container: Any, child: Any) -> List[str]:
    """Index or key labels of ``child`` inside a list/tuple/dict/set/deque."""
    if isinstance(container, dict):
        return [f"[{_short(k)}]" for k, v in list(container.items()) if v is child] + \
               [f"key {_short(k)}" for k in list(container) if k is child]
    if isinstance(container, (list, tuple)) or type(container).__name__ == "deque":
        return [f"[{i}]" for i, v in enumerate(list(container)) if v is child]
    if isinstance(container, (set, frozenset)):
        return ["{element}"]
    return []


def _hidden_field_labels(holder: Any, obj: Any) -> List[str]:
    """``obj`` in fields of ``holder`` that no attribute reaches: a
    suspended generator's (coroutine's) locals, an lru_cache's dict, keys
    and results, an itertools cycle's or tee's fields, a builtin
    iterator's (``list_iterator.seq``, ``zip.iterators``); [] for any other
    holder or where it holds ``obj`` otherwise."""
    if isinstance(holder, _SUSPENDED):
        frame = _suspended_code_and_frame(holder)[1]
        return _frame_labels(frame, obj) if frame is not None else []
    if _LRU_WRAPPER is not None and type(holder) is _LRU_WRAPPER:
        return _lru_cache_labels(holder, obj)
    return _itertools_labels(holder, obj) or _iterator_labels(holder, obj)
