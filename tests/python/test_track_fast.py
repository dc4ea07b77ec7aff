"""track()'s books and per-op path in C (the module vramtrace._trackfast,
from scripts/vramtrace/native/trackfast/), through the dispatch mode
(VRAMTRACE_TRACK_OBSERVER=0: these tests pin it): the leak shapes flagged
and their fixed twins clean, the same findings as through the op observer
(two shapes), and without the extension nothing recorded, said once."""

from __future__ import annotations

import os
import re
import types
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
from conftest import run_traced, vt_check, vt_cli  # noqa: E402
from test_pyframes import snapshot_json  # noqa: E402

torch = pytest.importorskip("torch")
import vramtrace  # noqa: E402
import vramtrace.torch as vtt  # noqa: E402


@pytest.fixture(autouse=True)
def _through_the_mode(monkeypatch):
    """These tests are the dispatch mode's C path (track() uses the op
    observer where it builds: test_track_observer_*.py); children inherit."""
    monkeypatch.setenv("VRAMTRACE_TRACK_OBSERVER", "0")


def _loaded_trackfast():
    """The _trackfast module track() loads (the C path asserted taken)."""
    with vtt.track() as tr:
        assert tr._fast is not None, "the _trackfast extension was not loaded"
    return vtt._fast_path._trackfast


def test_the_built_library_records_through_the_c_path(real_lib):
    with vtt.track() as tr:
        assert tr._fast is not None, "the _trackfast extension was not loaded"
        # PyTorch looks __torch_dispatch__ up on the mode: the C one, bound to it
        got = tr._mode.__torch_dispatch__
        assert isinstance(got, types.MethodType) and got.__self__ is tr._mode
        assert type(got.__func__).__name__ == "builtin_function_or_method"
        x = torch.ones(4, 4)
        y = (x @ x).relu()
        tid = tr.tensor_id(y)
    assert tr.ops >= 3 and tid != 0 and tr.errors == 0


def test_the_source_tree_imports_the_extension_as_the_installed_package_does(real_lib):
    """One loader: a plain import of vramtrace._trackfast. In a source tree
    the build tree's folder of the package's compiled parts (BUILD/scripts/
    vramtrace, beside the library) joins the package's path; the installed
    package has it inside (tests/wheel)."""
    import importlib
    import sys
    with vtt.track() as tr:
        assert tr._fast is not None
    mod = vtt._fast_path._trackfast
    assert mod.__name__ == "vramtrace._trackfast"
    assert sys.modules["vramtrace._trackfast"] is mod
    assert importlib.import_module("vramtrace._trackfast") is mod
    built = os.path.dirname(mod.__file__)
    libdir = os.path.dirname(os.path.realpath(str(tr._lib.path)))
    assert built == os.path.join(libdir, "scripts", "vramtrace") and built in vramtrace.__path__


def test_instances_of_finds_what_issubclass_of_the_type_finds(real_lib):
    """The models are looked up (_Naming._param_name) with _trackfast's
    instances_of over the collector's objects: the items whose own type is
    the class or a subclass, as issubclass(type(o), cls) in Python, never
    what an object's computed __class__ claims."""
    import gc
    import torch
    mod = _loaded_trackfast()

    class Mine(torch.nn.Linear):
        pass

    class Pretender:
        @property
        def __class__(self):   # isinstance() would believe it
            return torch.nn.Module

    objs = [torch.nn.Linear(2, 2), Mine(2, 2), Pretender(), 3, "x", torch.zeros(1)]
    assert isinstance(objs[2], torch.nn.Module)
    got = mod.instances_of(objs, torch.nn.Module)
    assert [type(o) for o in got] == [torch.nn.Linear, Mine]
    every = gc.get_objects()
    assert mod.instances_of(every, torch.nn.Module) == \
        [o for o in every if issubclass(type(o), torch.nn.Module)]
    del every
    with pytest.raises(TypeError):
        mod.instances_of(tuple(objs), torch.nn.Module)


def test_referrers_of_many_objects_is_gc_get_referrers_answer_in_one_pass(real_lib):
    """The holder walks look up a level's referrers with _trackfast's
    referrers_of from _referrers._NATIVE_FROM objects on (one heap pass,
    where gc.get_referrers compares each reference with each object): the
    same referrers, each once, for holders of every kind the walk names --
    and not the container the objects came in."""
    import gc
    import types as pytypes
    from vramtrace import _referrers
    mod = _loaded_trackfast()
    assert _referrers._native_referrers is mod.referrers_of

    class Holder:
        pass

    objs = [Holder() for _ in range(3 * _referrers._NATIVE_FROM)]
    h = Holder()
    h.first, h.second = objs[0], objs[1]                 # one object, two of them
    as_value, as_key = {"k": objs[2]}, {objs[3]: 1}
    in_tuple, in_set = (objs[4], 5), {objs[5]}
    cell = (lambda: objs[6])                             # noqa: E731 (a closure's cell)
    bound = pytypes.MethodType(lambda self: None, objs[7])

    def suspended(x):
        yield x
    gen = suspended(objs[8])
    next(gen)                                            # a frame's local
    lists = [[o] for o in objs[9:]]
    want = {id(r) for r in gc.get_referrers(*objs) if r is not objs}
    got = mod.referrers_of(objs)
    assert len(got) == len({id(r) for r in got}), "a referrer twice"
    assert {id(r) for r in got} == want
    assert all(r is not objs for r in got)
    assert {id(r) for r in _referrers.referrers_of(objs)} == want
    assert {id(r) for r in mod.referrers_of(tuple(objs[:3]))} == \
        {id(r) for r in gc.get_referrers(*objs[:3])}
    assert mod.referrers_of([]) == []
    with pytest.raises(TypeError):
        mod.referrers_of(set(objs))
    del h, as_value, as_key, in_tuple, in_set, cell, bound, gen, lists


def test_the_referrer_index_answers_as_gc_get_referrers_did_when_it_was_built(real_lib):
    """A walk deeper than three levels reads the rest from _trackfast's
    ReferrerIndex (every reference between the collector's objects, one
    pass): for any objects, the referrers gc.get_referrers gives, in its
    order (the walk's breadth bound keeps the first), for holders of every
    kind the walk names; an object it never saw answered with None (the
    walk makes a pass); nothing kept once closed."""
    import gc
    import sys
    import types as pytypes
    mod = _loaded_trackfast()

    class Holder:
        pass

    objs = [Holder() for _ in range(12)]
    h = Holder()
    h.first, h.second = objs[0], objs[1]
    as_value, as_key = {"k": objs[2]}, {objs[3]: 1}
    in_tuple, in_set = (objs[4], 5), {objs[5]}
    cell = (lambda: objs[6])                             # noqa: E731
    bound = pytypes.MethodType(lambda self: None, objs[7])

    def suspended(x):
        yield x
    gen = suspended(objs[8])
    next(gen)
    lists = [[o] for o in objs[9:]]
    levels = (objs, objs[:1], [h], [as_value, h.__dict__], [objs[6], objs[8]])
    before = sys.getrefcount(h)
    # no collection meanwhile: it would move objects between the collector's
    # generations, and gc.get_referrers's order with them
    gc.disable()
    try:
        known = {id(o) for o in gc.get_objects()}   # (what the index saw: made before it)
        ix = mod.ReferrerIndex()
        assert ix.edges > 0
        for some in levels:
            want = [r for r in gc.get_referrers(*some)
                    if id(r) in known and r is not levels and r is not objs]
            got = ix.referrers_of(some)
            assert [id(r) for r in got if r is not levels and r is not objs] == \
                [id(r) for r in want]
            assert len(got) == len({id(r) for r in got}), "a referrer twice"
            del want, got
    finally:
        gc.enable()
    assert ix.referrers_of(()) == []
    assert ix.referrers_of([Holder()]) is None           # made since: not in it
    with pytest.raises(TypeError):
        ix.referrers_of(set(objs))
    assert sys.getrefcount(h) == before + 1              # its heap's list holds h
    ix.close()
    assert sys.getrefcount(h) == before
    with pytest.raises(ValueError):
        ix.referrers_of(objs)
    with pytest.raises(TypeError):
        mod.ReferrerIndex(objs)
    with pytest.raises(OverflowError):   # a heap larger than the limit: not indexed
        mod.ReferrerIndex(limit=len(objs))
    del h, as_value, as_key, in_tuple, in_set, cell, bound, gen, lists


def test_a_deep_walk_finds_through_the_index_what_its_passes_find(real_lib, monkeypatch):
    """A chain deeper than _INDEX_AFTER levels (attributes, dicts, lists and
    a closure) is found the same through the index as by a pass per level,
    for the price of the index and the first levels' passes."""
    from vramtrace import _referrers
    with vtt.track() as tr:
        assert tr._fast is not None
    assert _referrers._native_index is vtt._fast_path._trackfast.ReferrerIndex

    class Node:
        pass

    target = Node()
    a, b, c = Node(), Node(), Node()
    a.items = {"kept": [target]}
    b.inner = a
    c.fn = (lambda: b)                                   # noqa: E731

    def walk():
        """(levels, passes, edges by name): nothing of the walk kept, or the
        next walk would find its result holding the chain"""
        res = _referrers.walk_referrers({("t", 1): target}, lambda o: None,
                                        max_depth=8, use_frames=False)
        try:
            return res.levels, res.passes, sorted(
                (res.names.get(e.src, "start"), res.names.get(e.dst, "start"), e.label)
                for e in res.edges)
        finally:
            res.objects.clear()

    levels, passes, by_index = walk()
    assert levels > _referrers._INDEX_AFTER + 2
    assert passes <= _referrers._INDEX_AFTER * 2 + _referrers._index_passes
    monkeypatch.setattr(_referrers, "_native_index", None)
    levels_passed, passes_passed, by_passes = walk()
    # (its levels may differ: CPython 3.11 makes an instance's __dict__ once
    # the walk reads it, a level between the owner and its attributes)
    assert levels_passed > _referrers._INDEX_AFTER + 2
    assert passes_passed == pytest.approx(levels_passed, abs=0.5)   # a pass a level
    # a heap of more objects than the index's limit: a pass a level, and the
    # next walks do not ask for a while (each refusal lists the heap)
    asked = []

    def index(**kw):
        asked.append(kw)
        return vtt._fast_path._trackfast.ReferrerIndex(**kw)
    monkeypatch.setattr(_referrers, "_native_index", index)
    monkeypatch.setattr(_referrers, "_INDEX_MAX_OBJECTS", 10)
    monkeypatch.setattr(_referrers, "_index_refused", 0)
    levels_large, passes_large, by_large = walk()
    assert passes_large == pytest.approx(levels_large, abs=0.5)
    assert by_large == by_index and len(asked) == 1
    assert _referrers._index_refused == _referrers._INDEX_REFUSED_WALKS
    monkeypatch.setattr(_referrers, "_INDEX_MAX_OBJECTS", 10 ** 9)
    levels_after, passes_after, _ = walk()
    assert passes_after == pytest.approx(levels_after, abs=0.5) and len(asked) == 1   # not asked
    assert _referrers._index_refused == _referrers._INDEX_REFUSED_WALKS - 1
    monkeypatch.setattr(_referrers, "_index_refused", 0)
    walk()
    assert len(asked) == 2                                          # asked again
    assert by_index == by_passes
    labels = {e[2] for e in by_index}
    assert {".items", "['kept']", "[0]", ".inner"} <= labels, labels


def test_a_walk_reads_the_index_its_time_paid_for_past_the_deadline(real_lib):
    """A walk builds the index when what is left of its time pays half of
    it; the build then ends past the deadline, and the walk goes on through
    its levels (a lookup each) instead of stopping at the next: it was cut
    there, before the frames' locals of the level it had found (actor_
    critic.py's closure `act`, a local of main, became the root of the
    kept list). Here a clock read once a level: a second a level by pass,
    the build ending half a second past the deadline."""
    from vramtrace import _referrers
    with vtt.track() as tr:
        assert tr._fast is not None

    class Node:
        pass

    target = Node()
    top = target
    links = []
    for _ in range(6):
        up = Node()
        up.held = top
        links.append(up)
        top = up
    ticks = iter([0.0, 1.0, 2.0, 3.0, 23.5] + [23.5 + k / 10 for k in range(1, 100)])
    res = _referrers.walk_referrers({("t", 1): target}, lambda o: None, max_depth=16,
                                    use_frames=False, deadline=23.0, clock=lambda: next(ticks))
    try:
        assert res.levels > _referrers._INDEX_AFTER + 2 and not res.cut_off, \
            (res.levels, res.cut_off)
        names = {res.names.get(e.src) for e in res.edges}
        assert "list" in names, names    # `links`, which holds the top of the chain
    finally:
        res.objects.clear()
    del links


def test_without_the_extension_track_records_nothing_and_says_why(real_lib, monkeypatch):
    """The declared limit: no _trackfast for this Python (CPython before
    3.11, or a build without it) -- the block runs as without vramtrace."""
    from vramtrace.torch import _tracker
    monkeypatch.setattr(vtt._fast_path, "_trackfast", None)   # as if not built
    monkeypatch.setattr(_tracker, "_said_blind", False)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with vtt.track() as tr:
            y = torch.ones(3) * 2
        with vtt.track():
            y = y + 1
    assert tr._fast is None and tr._mode is None and tr.ops == 0 and tr.tensor_id(y) == 0
    assert y.tolist() == [3.0, 3.0, 3.0]
    said = [str(m.message) for m in w if "vramtrace" in str(m.message)]
    assert len(said) == 1 and "vramtrace._trackfast" in said[0] and "not built" in said[0], said


def test_a_recording_failure_never_fails_the_op(real_lib):
    """The op's result is returned; the failure is counted and warned once."""
    with vtt.track() as tr:
        assert tr._fast is not None

        def broken(*_a, **_k):
            raise RuntimeError("injected")
        tr._out_name = broken           # every new output's name now fails
        tr._names.clear()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            a = torch.arange(6.0)
            b = a * 3
            c = b + 1
        assert c.tolist() == [1.0, 4.0, 7.0, 10.0, 13.0, 16.0]
        assert tr.errors >= 2
        msgs = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
        assert len(msgs) == 1 and "injected" in msgs[0], msgs


def test_a_stranger_in_the_books_is_a_recording_failure_not_a_new_tensor(real_lib):
    """The index of live tensors holding something else than a record for a
    tensor is the books' corruption: every lookup (record_of) says so, and
    the op is not recorded as a first sight under a new record."""
    with vtt.track() as tr:
        a = torch.arange(4.0)
        tr._fast.settle()
        tr._fast.flush()
        tid = tr.tensor_id(a)
        assert tid
        tr._by_obj[id(a)] = "a stranger"
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            b = a * 2
        assert b.tolist() == [0.0, 2.0, 4.0, 6.0]
        assert tr.errors == 1
        msgs = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
        assert len(msgs) == 1 and "hold no tensor record" in msgs[0], msgs
        del tr._by_obj[id(a)]
        # the mark's sweep lists its books through one filter: the same
        for book, listing in ((tr._storages, tr._fast.storages_to_check),
                              (tr._by_tid, tr._fast.tensors_to_check)):
            book["stranger"] = "a stranger"
            with pytest.raises(RuntimeError, match="hold a stranger"):
                listing()
            del book["stranger"]


def test_tensors_die_through_the_c_callbacks(real_lib):
    """A tensor made and dropped inside the block leaves the books: its
    record, its storage, and (host memory) the declared range."""
    with vtt.track() as tr:
        keep = torch.zeros(8)
        for _ in range(20):
            t = keep + 1
            v = t[2:4]
            del t, v
        tr._fast.settle()
        live = [r for r in tr._by_tid.values() if r.ref is not None and r.ref() is not None]
        assert len(live) == len(tr._by_tid), "dead tensors left in the books"
        assert len(tr._storages) <= 3, tr._storages
        assert sorted(tr._starts) == tr._starts
        assert len(tr._starts) == len(tr._at_ptr) == sum(
            1 for s in tr._storages.values() if s.declared)
    assert tr.errors == 0


TENSOR_FIELDS = ("tid", "skey", "ref", "name", "base", "pend")
STORAGE_FIELDS = ("ptr", "nbytes", "device", "external", "tids", "last_epoch", "skey", "weak",
                  "declared", "seen_epoch", "rest", "twins")


def test_records_made_in_c_have_every_field_set(real_lib):
    """The books' records are the extension's types (native fields), made
    by the C path without a constructor: every field set as the
    constructor sets it, then as the rules change it."""
    with vtt.track() as tr:
        vtt.mark("a")
        vtt.mark("b")   # epoch 2: a field left at 0 would show
        x = torch.ones(16)
        y = x * 2
        v = y[4:]
        z = v + 1   # flushes y and v
        mod = vtt._fast_path._trackfast
        for rec in (tr._by_obj[id(y)], tr._by_obj[id(v)]):
            assert type(rec) is mod.TensorRec
            for field in TENSOR_FIELDS:
                getattr(rec, field)   # a field missing raises AttributeError
            assert rec.tid != 0 and rec.pend is None and rec.ref() is not None
        assert tr._by_obj[id(v)].base == tr._by_obj[id(y)].tid
        srec = tr._storages[tr._by_obj[id(y)].skey]
        assert type(srec) is mod.StorageRec
        for field in STORAGE_FIELDS:
            getattr(srec, field)
        assert (srec.device, srec.external, srec.declared) == (-1, True, True)
        assert tr.epoch == 2 and srec.seen_epoch == srec.last_epoch == 2 and srec.rest == 0
        assert (srec.ptr, srec.nbytes) == (y.untyped_storage().data_ptr(), 64)
        assert srec.skey == y.untyped_storage()._cdata and srec.weak != 0
        assert tr._by_obj[id(y)].skey == tr._by_obj[id(v)].skey == srec.skey
        assert srec.tids == {tr._by_obj[id(y)], tr._by_obj[id(v)]}
        del z
    assert tr.errors == 0


def test_the_native_records_construct_and_read_back(real_lib):
    """The records' Python face (the package reads every field, and a
    test or a debugger may make one): every field reads back what was
    given or assigned."""
    mod = _loaded_trackfast()
    key = object()
    t = mod.TensorRec(key, "t", 7, (0x1000, 64, 3))
    assert (t.tid, t.skey, t.ref, t.name, t.base, t.pend) == (0, key, None, "t", 7,
                                                             (0x1000, 64, 3))
    assert mod.TensorRec(key, "u", 0, None).pend is None
    s = mod.StorageRec(0x2000, 128, -1, True, 5, key, 9)
    assert [getattr(s, f) for f in STORAGE_FIELDS] == [0x2000, 128, -1, True, set(), 5, key, 9,
                                                      False, 5, 0, None]
    t.pend, t.tid, t.ref = None, 12, None
    assert (t.pend, t.tid, t.ref) == (None, 12, None)
    s.declared, s.last_epoch, s.seen_epoch, s.rest, s.weak, s.twins = True, 4, 3, 2, 0, {s}
    assert (s.declared, s.last_epoch, s.seen_epoch, s.rest, s.weak) == (True, 4, 3, 2, 0)
    assert s.twins == {s}
    s.twins = None   # a record that names itself: freed by the collector too
    with pytest.raises(TypeError):
        t.pend = (1, 2)   # not (ptr, nbytes, stack)


def test_a_marks_window_and_pause_are_the_librarys_read_in_c(real_lib, tmp_path, monkeypatch):
    """A mark reads the ring's window twice and records its pause once
    through the Dispatcher's C calls (vt_trace_window, vt_paused), not
    ctypes (whose call right after a step costs many times its warm cost):
    the window is the library's own reading, a pause so recorded is a PAUSE
    of those nanoseconds in the snapshot (none for 0 ns), and a mark calls
    none of the library's ctypes wrappers: its MARK too is recorded in C
    once the extension is loaded (Library.use_text_call), its label as
    ctypes would have encoded it (a lone surrogate replaced)."""
    snap = str(tmp_path / "pause.vtsnap")
    with vtt.track() as tr:
        x = torch.ones(4, 4) @ torch.ones(4, 4)   # the process records events of its own
        got, lib = tr._fast.trace_window(), tr._lib.trace_window()
        assert got is not None and got[0] > 0 and got == lib, (got, lib)
        assert tr._fast.paused(123_456) is True
        assert tr._fast.paused(0) is True
        # the library's ctypes functions, as Library's wrappers call them
        through_ctypes = []
        for name in ("vt_trace_window", "vt_paused", "vt_mark"):
            fn = tr._lib._fn[name]
            monkeypatch.setitem(tr._lib._fn, name,
                                lambda *a, _n=name, _f=fn: through_ctypes.append(_n) or _f(*a))
        window_reads = []
        read = tr._read_window
        monkeypatch.setattr(tr, "_read_window", lambda: window_reads.append(1) or read())
        vtt.mark("step 1")   # reads the window (_declare_tensors_again), records its pause
        vramtrace.mark("caf\u00e9 \udc80")
        monkeypatch.undo()
        assert window_reads and through_ctypes == [], (window_reads, through_ctypes)
        vramtrace.snapshot(snap)
        del x
    events = snapshot_json(snap, events=True)["events"]
    marks = [e["str"] for e in events if e["kind"] == "MARK"]
    assert marks[-2:] == ["step 1", "caf\u00e9 ?"], marks[-3:]   # as _lib._enc encodes it
    pauses = [e["aux"] for e in events if e["kind"] == "PAUSE"]
    # (earlier tests of this process paused it too: the ring holds theirs)
    assert 123_456 in pauses and all(p > 0 for p in pauses), pauses
    assert len(pauses) > pauses.index(123_456) + 1, pauses   # and the mark's after it


def test_a_marks_sweep_names_only_what_changed(real_lib):
    """At a mark the C filter hands the Python rules only the storages and
    tensors that changed behind the mode's back: a storage resized through
    its storage object, a tensor given another storage by ``.data =``."""
    with vtt.track() as tr:
        keep = [torch.ones(64) + i for i in range(10)]
        resized = torch.zeros(256) + 1
        moved = torch.zeros(32) + 2
        vtt.mark("all known")
        assert tr._fast.storages_to_check() == []
        assert tr._fast.tensors_to_check() == []
        srec = tr._storages[tr._by_obj[id(resized)].skey]
        resized.untyped_storage().resize_(0)   # no op the mode sees
        moved_rec = tr._by_obj[id(moved)]
        old = tr._storages[moved_rec.skey]
        moved.data = torch.empty(1)            # neither; its old storage is freed
        assert set(tr._fast.storages_to_check()) == {srec, old}
        assert tr._fast.tensors_to_check() == [moved_rec]
        vtt.mark("after")                      # the Python rules act on them
        assert tr._fast.storages_to_check() == []
        assert tr._fast.tensors_to_check() == []
        assert srec.nbytes == 0 or tr._storages.get(srec.skey) is not srec
        assert tr._by_obj[id(moved)] is not moved_rec
        del keep
    assert tr.errors == 0


# track()'s paths, by the environment that picks each (the children inherit it)
PATHS = {"c": {"VRAMTRACE_TRACK_OBSERVER": "0"},
         "observer": {"VRAMTRACE_TRACK_OBSERVER": "1"}}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """``report(shape, twin, path)``: (exit status, findings as a user reads
    them, tensors) of `vramtrace check` on leak_shapes.py SHAPE TWIN tracked
    on PATHS[path]. One run per arguments (each is a torch process): the
    mode's run is judged, and compared with the observer's."""
    runs: dict = {}

    def get(shape: str, twin: str, path: str) -> tuple:
        key = (shape, twin, path)
        if key not in runs:
            out = str(tmp_path_factory.mktemp(f"{shape}-{twin}-{path}") / "run.vtsnap")
            with pytest.MonkeyPatch.context() as mp:
                for name, value in PATHS[path].items():
                    mp.setenv(name, value)
                run_traced(os.path.join(HERE, "leak_shapes.py"), [shape, twin, out], out,
                           timeout=90)
            rc, rep = vt_check(out, timeout=60)
            # addresses differ between processes: compare what a user reads
            found = sorted((f["rule"], f["bytes"], f["external"],
                            tuple(sorted(re.sub(r"0x[0-9a-f]+", "0x?", p["text"])
                                         for p in f["paths"])))
                           for f in rep["findings"])
            runs[key] = (rc, found, rep["tensors"])
        return runs[key]
    return get


@pytest.mark.parametrize("shape", ["cycle", "view", "pipeline", "hook"])
@pytest.mark.parametrize("twin", ["leak", "fixed"])
def test_the_mode_flags_each_leak_shape_and_passes_its_twin(shape, twin, report):
    vt_cli()
    rc, found, tensors = report(shape, twin, "c")
    assert rc == (1 if twin == "leak" else 0), found
    assert bool(found) == (twin == "leak") and tensors > 0


@pytest.fixture(scope="module")
def observer():
    """The op observer, built into VRAMTRACE_CACHE_DIR, where the children
    load it (one that cannot would quietly take the mode: no comparison)."""
    from vramtrace import _trackobs
    if _trackobs.load() is None:
        pytest.fail("the op observer could not be built (torch.utils.cpp_extension, "
                    f"g++ and ninja are in the test environment): {_trackobs.why_not}")


@pytest.mark.parametrize("shape", ["hook", "pipeline"])
@pytest.mark.parametrize("twin", ["leak", "fixed"])
def test_the_observer_and_the_mode_give_the_same_findings(shape, twin, report, observer):
    """The op observer (test_track_observer_*.py's subject) against the mode's
    C path: here, where the C path's run is made anyway."""
    vt_cli()
    rc_obs, found_obs, _ = report(shape, twin, "observer")
    rc_mode, found_mode, _ = report(shape, twin, "c")
    assert rc_obs == rc_mode == (1 if twin == "leak" else 0)
    assert found_obs == found_mode


@pytest.mark.parametrize("reader", ["library", "frame objects"])
def test_a_stack_seen_before_is_looked_up_not_interned_again(real_lib, reader):
    """Every step of a loop runs the same lines: after the first, an op's
    stack is one lookup in the C cache (the interner is not called), whether
    the frames are read by the library (vt_python_frames) or, where it
    cannot read them, through their frame objects."""
    tr = vtt.Tracker()
    calls = []
    interned = tr._stacks.intern_frame

    def counting(frame):
        calls.append(1)
        return interned(frame)
    # a Dispatcher made with the counting interner (the mode binds it at enter)
    points = _entry_points(tr) + ([_address(tr, "vt_python_frames")] if reader == "library" else [])
    tr._fast = type(tr._fast)(tr, counting, *points[:6], True, *points[6:])
    with tr:
        x = torch.ones(4)
        for _ in range(50):
            x = x + 1
        cached = tr._fast.cached_stacks
    assert x[0].item() == 51.0
    assert 1 <= cached <= 4 and len(calls) == cached, (cached, len(calls))


def _address(tr, name: str) -> int:
    import ctypes
    return ctypes.cast(tr._lib.raw(name), ctypes.c_void_p).value


def _entry_points(tr) -> list:
    return [_address(tr, n)
            for n in ("vt_tensor_use_stack", "vt_tensor_new_stack", "vt_tensor_drop",
                      "vt_storage_external_stack", "vt_storage_external_free_stack",
                      "vt_tensor_name")]


def test_the_library_reads_the_frames_python_sees(real_lib):
    """vt_python_frames, the one reader of Python frames in C: the calling
    thread's frames, innermost first, as (code object, instruction offset)
    pairs, as the interpreter's own frame objects give them."""
    import ctypes
    import sys
    pairs = (ctypes.c_uint64 * 400)()
    fn = real_lib.raw("vt_python_frames")

    def nested(k):
        if k:
            return nested(k - 1)
        n = fn(pairs, 200)
        chain, frame = [], sys._getframe()   # read while every frame still runs
        while frame is not None:
            chain.append((id(frame.f_code), frame.f_lasti))
            frame = frame.f_back
        return n, chain
    n, chain = nested(12)
    assert n == min(len(chain), 200) and n > 13
    assert [pairs[2 * i] for i in range(n)] == [code for code, _ in chain[:n]]
    # the callers' instructions (the innermost frame has moved on since)
    assert [pairs[2 * i + 1] for i in range(1, n)] == [lasti for _, lasti in chain[1:n]]


@pytest.mark.parametrize("reader", ["library", "frame objects"])
def test_the_c_path_keys_stacks_by_the_librarys_reader(real_lib, reader):
    """The C path keys an op's stack by the frames vt_python_frames reads
    (no frame object made, none walked); given no reader (an older library)
    it walks the frame objects, and the same program records the same."""
    tr = vtt.Tracker()
    points = _entry_points(tr) + ([_address(tr, "vt_python_frames")] if reader == "library" else [])
    tr._fast = type(tr._fast)(tr, tr._stacks.intern_frame, *points[:6], True, *points[6:])

    def recurse(k, x):
        if k:
            return recurse(k - 1, x)
        for _ in range(3):
            x = x * 2
        return x
    with tr:
        x = recurse(30, torch.ones(4))
        walks, cached = tr._fast.object_walks, tr._fast.cached_stacks
    assert x[0].item() == 8.0 and cached >= 1
    if reader == "library":
        assert walks == 0
    else:
        assert walks >= 4   # ones() and the three products


def test_a_running_frames_value_stack_is_read_for_what_no_local_holds(real_lib):
    """The collector does not traverse a running frame's value stack: a list
    that only a for loop's iterator walks (`for x in [t.cuda() for t in
    data]`) read as a chain from nowhere (`list_iterator.seq → list[*]`).
    _trackfast.frame_stack reads the stack of a frame that called a Python
    function, and the walk names it: `for loop's iterator in fn file:line`;
    a frame that calls into C, or runs, gives nothing."""
    import sys
    from vramtrace import _referrers
    mod = _loaded_trackfast()
    assert _referrers._native_frame_stack is mod.frame_stack

    class Batch:
        pass

    def seen(target):
        me = sys._getframe()
        return (mod.frame_stack(me), [type(v).__name__ for v in mod.frame_stack(me.f_back)],
                _referrers.walk_referrers({("t", 1): target}, lambda o: None))

    def loop():
        for b in [Batch(), Batch()]:   # (a list display: a tuple's iterator)
            return seen(b)

    def loop_over(items):
        for b in iter(list(items)):
            del b
            return seen(items[0])

    running, stack, res = loop()
    assert running == () and stack == ["tuple_iterator"], (running, stack)
    labels = {e.label.rsplit(" ", 1)[0] for e in res.edges}
    assert "for loop's iterator in loop" in labels and "local 'b' in loop" in labels, labels
    _, _, res = loop_over([Batch()])
    assert any(e.label.startswith("for loop's iterator in loop_over") for e in res.edges), \
        [e.label for e in res.edges]
    with pytest.raises(TypeError):
        mod.frame_stack(None)


def test_a_with_blocks_context_manager_is_named_by_its_block(real_lib):
    """A with block keeps its context manager's bound __exit__ on the value
    stack until it ends, and no local holds the manager where the block has
    no `as` (`with Stash(): train(...)`, a pack hook's stash of every saved
    activation): the chain began at an unnamed `method __exit__`. The walk
    names the block: `with block in fn file:line → method
    __exit__.__self__`."""
    import threading
    from vramtrace import _referrers
    _loaded_trackfast()

    def kept_by_block():
        kept = object()
        with _Handoff(kept) as h:
            del h
            return _referrers.walk_referrers({("t", 1): kept}, lambda o: None)

    def named_by_as(kept):
        with _Handoff(kept) as h:
            return _referrers.walk_referrers({("t", 1): kept}, lambda o: None), h

    labels = [e.label for e in kept_by_block().edges]
    assert any(lab.startswith("with block in kept_by_block ") for lab in labels), labels
    assert ".__self__" in labels and ".kept" in labels, labels
    # where `as` keeps the manager in a local, the local alone names it (one root)
    res, _ = named_by_as(object())
    labels = [e.label for e in res.edges]
    assert any(lab.startswith("local 'h' in named_by_as") for lab in labels), labels
    assert not any(lab.startswith("with block") for lab in labels), labels
    assert _referrers._stack_label(threading.Lock().__exit__) == "with block"
    assert _referrers._stack_label(_Handoff(None).__enter__) is None


class _Handoff:
    """A context manager that keeps what it is given: the with block is its
    only holder once the block's `as` name is deleted."""

    def __init__(self, kept):
        self.kept = [kept]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
