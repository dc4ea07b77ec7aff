"""track()'s op observer (scripts/vramtrace/native/trackobs/observer.cpp, vramtrace/_trackobs.py):
PyTorch's RecordFunction hook instead of the dispatch mode, where it builds
(VRAMTRACE_TRACK_OBSERVER=0 keeps the mode).

The observer must hand the tracker the ops the mode would have been given
(the parts of a decomposed op, not the op; nothing a kernel calls inside),
with their tensors as the mode gets them, and the tracker must then report
what it reports through the mode. Built here at first use into
VRAMTRACE_CACHE_DIR (the meson test environment points it into the build
directory, so that one build serves the suite)."""

from __future__ import annotations

import gc
import time
import json
import os
import struct
import subprocess
import sys
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
from conftest import vt_cli  # noqa: E402

torch = pytest.importorskip("torch")
import vramtrace  # noqa: E402
import vramtrace.torch as vtt  # noqa: E402
from vramtrace import _trackobs  # noqa: E402
from bench_track import passthrough_mode, training_step  # noqa: E402
from test_pyframes import python_frames  # noqa: E402


@pytest.fixture(scope="module")
def observer():
    mod = _trackobs.load()
    if mod is None:
        pytest.fail("the op observer could not be built (torch.utils.cpp_extension, "
                    "g++ and ninja are in the test environment)")
    return mod


def _observed(observer, fn, full: bool = False) -> list:
    """(op name, args) of each op the observer hands over while fn() runs;
    full: (op name, args, outputs, facts, seq) of the owner thread's."""
    got: list = []
    observer.install(lambda f, a, o, facts, seq: got.append(
                         (str(f), a, o, facts, seq) if full else (str(f), a)),
                     lambda f, a, o, facts, stack: got.append(("engine " + str(f), a)),
                     _trackobs.op_for)
    try:
        fn()
    finally:
        observer.uninstall()
    return got


# scripts/vramtrace/native/trackobs/tensor_facts.h: seven 64-bit words per tensor
_FACTS = struct.Struct("=QQQQQqQ")


def _facts(blob: bytes) -> list:
    return [_FACTS.unpack_from(blob, i) for i in range(0, len(blob), _FACTS.size)]


def _tensors(args, out) -> list:
    """The tensors of an op handed over, in the order the recording meets them."""
    flat = []
    for v in list(args) + list(out):
        for t in (v if isinstance(v, list) else [v]):
            if isinstance(t, torch.Tensor):
                flat.append(t)
    return flat


def test_the_observer_replaces_the_mode(real_lib, observer, monkeypatch):
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    with vtt.track() as tr:
        assert tr._observer is observer and tr._mode is None
        assert torch._C._len_torch_dispatch_stack() == 0, "a dispatch mode is active"
        x = torch.ones(4, 4)
        y = (x @ x).relu()
        tid = tr.tensor_id(y)
        ops = tr.ops
    assert ops >= 3 and tid != 0 and tr.errors == 0
    assert tr._observer is None
    (y + 1).relu()   # after the block: not recorded
    assert tr.ops == ops


class _Tagged(torch.Tensor):
    """A __torch_function__ subclass: its results are made by as_subclass."""


def test_modules_parameters_and_subclasses_are_made_inside_track_as_without_it(
        real_lib, observer, monkeypatch):
    """nn.Parameter and nn.Buffer (Tensor._make_subclass) and a
    __torch_function__ subclass's results (Tensor.as_subclass) give an alias
    a Python object of their own type: the observer must not have given it
    one first (PyTorch then refuses the program's call)."""
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    with vtt.track() as tr:
        assert tr._observer is observer
        lin = torch.nn.Linear(4, 4)
        norm = torch.nn.LayerNorm(4)
        buf = torch.nn.Buffer(torch.ones(3))
        t = torch.ones(4).as_subclass(_Tagged)
        u = t * 2
        out = norm(lin(torch.ones(2, 4)))
        lin2 = torch.nn.Linear(4, 4)          # rebuilt inside
        tid = tr.tensor_id(lin.weight)
        errors = tr.errors
    assert type(lin.weight) is torch.nn.Parameter and type(lin2.bias) is torch.nn.Parameter
    assert isinstance(buf, torch.nn.Buffer) and type(u) is _Tagged
    assert out.shape == (2, 4)
    # the parameter was recorded (at the next op), with its own object
    assert tid != 0 and errors == 0


def test_by_default_the_observer_is_used_and_0_keeps_the_mode(real_lib, observer,
                                                              monkeypatch):
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    with vtt.track() as tr:
        assert tr._observer is observer and tr.ops_seen_by == "observer"
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "0")
    with vtt.track() as tr:
        assert tr._observer is None and tr._mode is not None
        assert tr.ops_seen_by == "dispatch mode"
        assert torch._C._len_torch_dispatch_stack() == 1


def test_a_storage_held_past_its_last_tensor_is_released_at_the_next_op(real_lib, observer,
                                                                        monkeypatch):
    """settle() (native/trackfast/storages.c): a storage whose last tensor
    died while something else held it (here its Python storage object,
    which the observer's bare facts count as another holder) stays in the
    books; the next op asks again, finds it gone (through the observer's
    storage reader) and records its release there, not at the next mark's
    sweep."""
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    with vtt.track() as tr:
        assert tr.ops_seen_by == "observer"
        x = torch.ones(8)
        y = x * 2
        x.add_(1)                  # y recorded
        skey = tr._by_obj[id(y)].skey
        st = y.untyped_storage()
        del y
        assert skey in tr._storages, "released while its storage object held it"
        del st
        x.add_(1)                  # in place: no memory that could reuse its address
        assert skey not in tr._storages, "left for the mark's sweep"
    assert tr.errors == 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("switch", ["", "0"])
def test_a_saved_result_is_released_at_the_first_op_after_the_backward_that_freed_it(
        real_lib, observer, monkeypatch, device, switch):
    """An op's result autograd saved (relu's) outlives its last Python
    tensor: asked at the next op, the storage is still held (by the graph)
    and stays in the books; the backward frees the graph, and the first op
    after it asks again (settle() in native/trackfast/storages.c) and
    records the release there, before any mark's sweep would. On the
    observer and on the mode; on a device the backward's ops run on an
    engine thread."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulator is not loaded)")
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)
    with vtt.track() as tr:
        assert tr.ops_seen_by == ("observer" if switch == "" else "dispatch mode")
        w = torch.ones(64, device=device, requires_grad=True)
        x = torch.ones(64, device=device)
        other = torch.ones(1, device=device)
        y = (x * w).relu()           # its result saved by ReluBackward0
        loss = y.sum()               # y recorded
        skey = tr._by_obj[id(y)].skey
        srec = tr._storages[skey]
        del y
        other.add_(1)
        assert tr._storages.get(skey) is srec, "released while the graph held it"
        loss.backward()              # frees the graph, and the saved result
        other.add_(1)
        # (the key, its StorageImpl's address, may name a new storage by now)
        assert tr._storages.get(skey) is not srec, "left for the next mark's sweep"
        assert not tr._held_elsewhere
    assert tr.errors == 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_after_a_training_step_the_books_hold_only_what_lives(real_lib, observer, monkeypatch,
                                                              device):
    """A training step of an nn.Sequential MLP (Linear/ReLU, SGD): what the
    backward freed (the activations autograd saved, whose tensors died in
    the forward) is released before the step ends, not at the next mark's
    sweep: the books hold the parameters, their gradients, the batch and
    the loss, and nothing waits. (On the simulated device, with the waiting
    storages never asked again at ops, seven storages of dead activations
    stayed until the next mark.)"""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulator is not loaded)")
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 32, device=device)
    with vtt.track() as tr:
        vtt.mark("step 0")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        params = list(model.parameters())
        live = ({p.untyped_storage()._cdata for p in params} |
                {p.grad.untyped_storage()._cdata for p in params} |
                {x.untyped_storage()._cdata, loss.untyped_storage()._cdata})
        assert set(tr._storages) == live
        assert not tr._held_elsewhere and not tr._maybe_gone
    assert tr.errors == 0


def test_a_deep_forwards_saved_results_are_each_asked_again_in_turn(real_lib, observer,
                                                                     monkeypatch):
    """A deep forward leaves a saved result per layer held by the graph;
    each op asks a few of them again, in turn, those still held going to
    the back (settle() in native/trackfast/storages.c: asking every one at
    every op grows with the square of their number). So after the
    backward frees them, a few ops release every one, before any mark,
    even behind storages the program keeps (its storage objects of the
    first layers' results: asked first, held for good)."""
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    with vtt.track() as tr:
        w = torch.ones(64, requires_grad=True)
        other = torch.ones(1)
        kept = []
        h = w * 1.0
        for i in range(16):
            h = (h * 2).relu()       # each result saved by ReluBackward0 only
            if i < 5:
                kept.append(h.untyped_storage())
        loss = h.sum()
        del h
        other.add_(1)
        held = len(tr._held_elsewhere)
        assert held >= 16, held
        loss.backward()
        for _ in range(held):        # at least one asked per op: every one by now
            other.add_(1)
        assert len(tr._held_elsewhere) == len(kept), len(tr._held_elsewhere)
    assert tr.errors == 0


def test_a_saved_result_a_reference_cycle_held_is_released_when_the_collector_frees_it(
        real_lib, observer, monkeypatch):
    """A graph kept by a reference cycle (an object that refers to itself
    and to the loss) holds its saved results until the collector runs:
    the waiting storage is asked again when the collection ends
    (_Cycles._on_gc), so its release is recorded at the collection, not
    at some later op or mark."""
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)

    class Step:
        pass

    with vtt.track() as tr:
        w = torch.ones(64, requires_grad=True)
        other = torch.ones(1)
        y = (w * 2).relu()           # its result saved by ReluBackward0
        step = Step()
        step.me = step
        step.loss = y.sum()          # y recorded
        skey = tr._by_obj[id(y)].skey
        srec = tr._storages[skey]
        del y
        other.add_(1)
        assert srec in tr._held_elsewhere, "not waiting for the graph to let it go"
        del step
        other.add_(1)
        assert tr._storages.get(skey) is srec, "released while the cycle held it"
        gc.collect()
        assert tr._storages.get(skey) is not srec, "not released at the collection"
        assert srec not in tr._held_elsewhere
    assert tr.errors == 0


@pytest.mark.parametrize("switch", ["", "1"])
def test_where_it_cannot_be_built_the_mode_is_used_and_why_is_kept(real_lib, monkeypatch,
                                                                   switch):
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)
    monkeypatch.setattr(_trackobs, "_SOURCE", "/nonexistent/observer.cpp")
    monkeypatch.setattr(_trackobs, "_module", False)   # not tried yet
    monkeypatch.setattr(_trackobs, "why_not", "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with vtt.track() as tr:
            y = (torch.ones(3) * 2).relu()
            tid = tr.tensor_id(y)
    assert tr.ops_seen_by == "dispatch mode" and tid != 0 and tr.errors == 0
    assert "not installed" in _trackobs.why_not
    said = [w for w in caught if _trackobs.ENV_SWITCH in str(w.message)]
    assert len(said) == (1 if switch == "1" else 0), [str(w.message) for w in caught]


def test_a_second_thread_tracking_meanwhile_uses_the_mode(real_lib, observer, monkeypatch):
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    import threading
    seen = []

    def other() -> None:
        with vtt.track() as tr2:
            (torch.ones(2) * 2).sum()
            seen.append((tr2.ops_seen_by, tr2.ops, tr2.errors))

    with vtt.track() as tr:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert tr.ops_seen_by == "observer"
    assert seen and seen[0][0] == "dispatch mode" and seen[0][1] >= 2 and seen[0][2] == 0


def test_track_with_threads_follows_the_threads_started_inside_it(real_lib, observer,
                                                                  monkeypatch):
    """track(threads=True) tracks the threads the block starts (what
    `vramtrace run --track` sets), their lines and their backward; without
    it only the entering thread's; the program's own profile hook is back
    after the block and in the threads."""
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    import threading

    def program_hook(frame, event, arg):
        return None

    def started_thread(tr) -> dict:
        got: dict = {}

        def work() -> None:
            w = torch.ones(4, requires_grad=True)
            (w * 3).sum().backward()
            got["t"] = torch.full((8,), 2.0)        # THREAD_LINE
            got["grad"] = w.grad
            got["hook"] = sys.getprofile()
            got["rec"] = tr._by_obj.get(id(got["t"]))

        th = threading.Thread(target=work)
        th.start()
        th.join(5)
        return got

    previous = threading.getprofile()
    threading.setprofile(program_hook)
    try:
        with vtt.track(threads=True) as tr:
            got = started_thread(tr)
            assert got["rec"] is not None and \
                got["rec"].name.startswith('got["t"] = torch.full((8,), 2.0)'), got["rec"]
            assert tr._by_obj.get(id(got["grad"])) is not None
            assert got["hook"] is program_hook      # the program's hook, in the thread
        assert threading.getprofile() is program_hook
        with vtt.track() as tr:
            got = started_thread(tr)
            assert got["rec"] is None                # the entering thread's only
    finally:
        threading.setprofile(previous)
    assert tr.errors == 0


def test_a_joined_threads_ops_are_recorded_also_during_a_mark(real_lib, observer, monkeypatch):
    """A thread that joined the observer (run --track has every thread the
    program starts join) records its ops with its own lines, its backward
    with it; an op of it that ends while another thread does a mark's work
    (the tracker records nothing of its own: the mark's Python lets the GIL
    go) waits for the mark and is recorded, where it was dropped (its
    tensor then first seen as an input, or never)."""
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    import threading
    made: dict = {}
    ready, in_mark = threading.Event(), threading.Event()
    with vtt.track(walk_fraction=None) as tr:
        assert tr.ops_seen_by == "observer"
        sweep = tr._sweep

        def slow_sweep(*a, **kw):   # the first mark's Python lets the GIL go
            if ready.is_set() and not in_mark.is_set():
                in_mark.set()
                time.sleep(0.05)    # the worker's op ends meanwhile
            return sweep(*a, **kw)

        def worker() -> None:
            made["joined"] = tr._follow_this_thread()
            w = torch.ones(4, requires_grad=True)
            (w * 2).sum().backward()                   # the thread's own backward
            made["grad"] = w.grad
            ready.set()
            in_mark.wait(5)
            made["t"] = torch.full((16,), 3.0)         # during the mark

        monkeypatch.setattr(tr, "_sweep", slow_sweep)
        th = threading.Thread(target=worker)
        th.start()
        ready.wait(5)
        vtt.mark("while the worker's op runs")
        th.join(5)
        assert in_mark.is_set()
        vtt.mark("after")
        assert made["joined"]
        rec = tr._by_obj.get(id(made["t"]))
        assert rec is not None, "the worker's op during the mark was not recorded"
        assert rec.name.startswith("made[\"t\"] = torch.full((16,), 3.0)"), rec.name
        assert tr._by_obj.get(id(made["grad"])) is not None   # its backward's .grad
    assert tr.errors == 0


def test_what_another_thread_frees_during_a_collection_was_not_freed_by_it(real_lib,
                                                                           observer):
    """A collection's finalizers run Python, which lets the GIL go: another
    thread's tensor that dies meanwhile was freed by that thread, not by the
    collection; only what dies on the collecting thread is the collection's
    (the checker's cycle rule names those: held by a reference cycle)."""
    import threading
    collected = []
    in_finalizer, dropped = threading.Event(), threading.Event()

    class Cyclic:
        def __del__(self):
            in_finalizer.set()
            dropped.wait(2)       # the GIL let go: the other thread drops its tensor

    with vtt.track(walk_fraction=None) as tr:
        tr._collected = lambda tid: collected.append(tid)
        kept = [torch.ones(64)]          # its last reference goes to the other thread
        theirs = tr.tensor_id(kept[0])
        cyc = Cyclic()
        cyc.me, cyc.t = cyc, torch.ones(32)
        ours = tr.tensor_id(cyc.t)

        def other() -> None:
            box = [kept.pop()]
            in_finalizer.wait(5)
            box.clear()                  # dies on this thread, while gc runs
            dropped.set()

        th = threading.Thread(target=other)
        th.start()
        while kept:
            time.sleep(0.001)
        del cyc
        gc.collect()
        th.join(5)
        assert dropped.is_set() and theirs and ours
        assert ours in collected and theirs not in collected, (ours, theirs, collected)


def test_the_observer_hands_over_the_ops_the_mode_sees(observer):
    step = training_step("small")
    step(0)
    seen: list = []
    with passthrough_mode(on_op=lambda f: seen.append(str(f))):
        step(1)
    got = [name for name, _ in _observed(observer, lambda: step(2))]
    # aten.linear decomposes above the mode: its parts are seen, not it.
    assert "aten.linear.default" not in got and got.count("aten.addmm.default") == 3
    # What only the mode sees is the mode's own doing: autograd saves an
    # output through aten.detach when a Python dispatch mode is active (a
    # shallow copy, no op, without one), and the profiler's record_function
    # ops (no tensors) are not observable. Everything else, in order:
    mode_only = ("aten.detach.default", "profiler.")
    assert [n for n in got if not n.startswith(mode_only)] == \
        [n for n in seen if not n.startswith(mode_only)]
    assert seen.count("aten.detach.default") > got.count("aten.detach.default")


@pytest.mark.parametrize("context", ["inference_mode", "no_grad", "enable_grad"])
def test_autograd_off_the_mode_sees_the_composite_op_and_so_does_the_observer(observer,
                                                                          context):
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)

    def run() -> None:
        with getattr(torch, context)():
            lin(x).relu().sum()

    seen: list = []
    with passthrough_mode(on_op=lambda f: seen.append(str(f))):
        run()
    got = [n for n, _ in _observed(observer, run)]
    mode_only = ("aten.detach.default",)
    assert [n for n in got if n not in mode_only] == [n for n in seen if n not in mode_only]
    # inference mode excludes autograd's keys: aten.linear reaches the mode whole
    assert ("aten.linear.default" in got) == (context == "inference_mode")


def test_a_python_number_is_handed_over_as_the_mode_gets_it(observer):
    x = torch.ones(3)
    got = _observed(observer, lambda: (x * 2.5, torch.add(x, 1)))
    assert [n for n, _ in got] == ["aten.mul.Tensor", "aten.add.Tensor"]
    for _, args in got:
        assert args[0] is x and args[1] is None   # not a 0-dim tensor of its own


def test_each_tensor_comes_with_what_python_reads_of_its_storage(observer):
    # The recording takes a new tensor's storage from these facts instead of
    # six Python calls; they must be what those calls return.
    x = torch.arange(32, dtype=torch.float32).reshape(8, 4).clone()   # no view itself
    got = _observed(observer, lambda: (x[2:] * 2.5, torch.cat([x, x[1:]]),
                                       torch.empty(0), x.t().contiguous()), full=True)
    assert [g[0] for g in got] == ["aten.slice.Tensor", "aten.mul.Tensor", "aten.slice.Tensor",
                                   "aten.cat.default", "aten.empty.memory_format",
                                   "aten.t.default", "aten.clone.default"]
    for name, args, out, blob, _ in got:
        tensors = _tensors(args, out)
        facts = _facts(blob)
        assert len(facts) == len(tensors), name   # the 2.5 has none: it is no tensor here
        for t, (skey, sptr, sbytes, tptr, tbytes, device, is_view) in zip(tensors, facts):
            st = t.untyped_storage()
            assert (skey, sptr, sbytes) == (st._cdata, st.data_ptr(), st.nbytes()), name
            assert (tptr, tbytes, device) == (t.data_ptr(), t.nbytes, -1), name
            assert is_view == int(t._is_view()), name
    slice_out = got[0][2][0]
    assert slice_out._base is x and _facts(got[0][3])[-1][6] == 1


def test_the_recording_takes_new_tensors_from_the_facts_and_records_the_same(
        real_lib, observer, monkeypatch, tmp_path):
    # With the facts (the observer's weak maker given) and without (the
    # tensors asked of Python, as the mode's recording does): the same books.
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    books = []
    for use_facts in (True, False):
        step = training_step("small")
        step(0)
        with vtt.track() as tr:
            if not use_facts:
                tr._fast.weak_maker = 0
            for i in range(1, 4):
                vtt.mark(f"iteration {i}")
                step(i)
            from_facts = tr._fast.tracked_from_facts
            # the tensors alive (weights, gradients, batches...), their storages
            books.append((tr._fast.ops, sorted((rec.name, tr._storages[rec.skey].nbytes,
                                                rec.base != 0)
                                               for rec in tr._by_tid.values())))
        assert tr.errors == 0
        assert (from_facts > 50) if use_facts else from_facts == 0
    assert books[0] == books[1] and len(books[0][1]) >= 10


@pytest.mark.parametrize("switch", ["1", "0"], ids=["observer", "mode"])
def test_a_storage_a_parameter_shares_stays_tracked_when_the_tensor_it_wrapped_dies(
        real_lib, observer, monkeypatch, switch):
    """``nn.Parameter(torch.zeros(n))``: the temporary dies, the parameter
    keeps its storage. PyTorch keeps a storage's Python object as long as
    the storage, one use more, and the observer tracks storages without
    making one: read with the count of a storage that has one, the
    temporary's death ended the storage in the books (its release recorded
    while the parameter used it; the pytest gate then blamed the first test
    using a module-scoped model for its parameters)."""
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)
    with vtt.track() as tr:
        p = torch.nn.Parameter(torch.zeros(64))
        q = torch.nn.Parameter(torch.ones(32) * 2)
        alive = tr.storages_now()
        assert p.untyped_storage()._cdata in alive and q.untyped_storage()._cdata in alive
        srec = tr._storages[q.untyped_storage()._cdata]
        assert srec.bare == (switch == "1")
        key = q.untyped_storage()._cdata
        del q
        vtt.mark("after")   # no op saw q: its storage's end is found by the mark's sweep
        alive = tr.storages_now()
        assert key not in alive and p.untyped_storage()._cdata in alive
    assert tr.errors == 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_parameter_moved_by_module_to_is_used_on_its_new_memory_without_a_mark(
        real_lib, observer, monkeypatch, device):
    """Module.to(), .cuda() and .half() give each parameter its new memory
    by ``param.data = copy`` (Module._apply), which no op shows. Found only
    by a mark's sweep, a program without marks (evaluation only: no
    optimizer step) had every later use counted on the memory the parameter
    had left, and the new memory was flagged as lingering from the copy on
    (a Hugging Face Trainer.evaluate() run: every parameter of the model).
    The observer's facts show the move at the parameter's next op."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulated one runs under simrun)")
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    with vtt.track() as tr:
        lin = torch.nn.Linear(16, 16)
        left = lin.weight.untyped_storage()._cdata
        lin.to(device=device, dtype=torch.float64)
        assert lin.weight.untyped_storage()._cdata != left    # moved, the same object
        lin(torch.ones(2, 16, dtype=torch.float64, device=device))
        rec = tr._by_obj[id(lin.weight)]
        assert rec.skey == lin.weight.untyped_storage()._cdata
        assert rec in tr._storages[rec.skey].tids
        # the memory it left holds no record of it (that storage may be gone)
        assert left not in tr._storages or rec not in tr._storages[left].tids
    assert tr.errors == 0


@pytest.mark.parametrize("switch", ["1", "0"], ids=["observer", "mode"])
def test_a_base_only_its_views_keep_is_dropped_at_the_next_mark(real_lib, observer,
                                                                monkeypatch, switch):
    """``kept.append(out[:, 0])``: PyTorch keeps each dropped ``out`` alive,
    Python object and all, as its view's ``_base``, so no death is seen and
    `check` took the storage as held by its owner (the pinned rule never saw
    the commonest way to pin one). At a mark such a base is dropped; a base
    the program still names (a local, a dict's value) is not."""
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)
    kept, named = [], {}
    with vtt.track() as tr:
        for i in range(3):
            vtt.mark(f"batch {i}")
            out = torch.randn(16, 64) * 1
            kept.append(out[:, 0])
        named["base"] = torch.randn(8, 8) * 1
        row = named["base"][0]
        ids = [tr.tensor_id(t) for t in (out, named["base"], kept[0], kept[1], row)]
        vtt.mark("end")
        owners = {r.tid for s in tr._storages.values() for r in s.tids if not r.base}
        views = {r.tid for s in tr._storages.values() for r in s.tids if r.base}
        first_bases = {r.base for s in tr._storages.values() for r in s.tids
                       if r.tid in (ids[2], ids[3])}
    assert tr.errors == 0 and all(ids)
    assert ids[0] in owners and ids[1] in owners          # named: kept in the books
    assert not first_bases & owners, (first_bases, owners)   # the dropped ones: gone
    assert {ids[2], ids[3], ids[4]} <= views
    del row


@pytest.mark.parametrize("switch", ["1", "0"], ids=["observer", "mode"])
def test_a_detached_base_only_its_views_keep_is_dropped_at_the_next_mark(
        real_lib, observer, monkeypatch, switch):
    """``kept.append(out.detach()[:, 0])``: the detached tensor is no view
    (the books take it for one of ``out``: it shares out's storage), and it
    is the row's ``_base``, kept alive, Python object and all, for the row;
    left in the books it covered the whole storage and the row pinned
    nothing. At a mark it is dropped like a base only views keep."""
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)
    kept, detached = [], []
    with vtt.track() as tr:
        for i in range(3):
            vtt.mark(f"batch {i}")
            out = torch.randn(16, 64) * 1
            kept.append(out.detach()[:, 0])
            detached.append(tr.tensor_id(kept[-1]._base))
        named = kept[-1]._base            # the program names the last one
        vtt.mark("end")
        alive = {r.tid for s in tr._storages.values() for r in s.tids}
    assert tr.errors == 0 and all(detached)
    assert not set(detached[:2]) & alive, (detached, alive)   # only the rows keep them
    assert detached[2] in alive                               # named: kept in the books
    assert {tr.tensor_id(r) for r in kept} <= alive
    del named


@pytest.mark.parametrize("switch", ["1", "0"], ids=["observer", "mode"])
def test_an_op_giving_a_tensor_other_memory_is_recorded_at_the_programs_line(
        real_lib, observer, monkeypatch, tmp_path, switch):
    # set_ (and resize_) go from the C recording to the tracker's Python
    # path whole, which took its stack two frames too far out: at a
    # shallow call it failed ("call stack is not deep enough"), deeper it
    # named a caller's line.
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)

    def move(t, src):
        t.set_(src.untyped_storage()); return sys._getframe().f_lineno  # noqa: E702

    with vtt.track(walk_fraction=None) as tr:
        t = torch.zeros(1000) * 1
        src = torch.ones(250) * 2
        old = torch._C._data_address(t)
        line = move(t, src)
        vtt.mark(label := f"moved {id(t):x}")
        assert tr._by_obj[id(t)].skey == src.untyped_storage()._cdata
    assert tr.errors == 0
    snap = str(tmp_path / "moved.vtsnap")
    vramtrace.snapshot(snap)
    sj = json.loads(subprocess.run([vt_cli(), "json", snap, "--events"], check=True,
                                   capture_output=True, text=True).stdout)
    # this test's events: the suite's earlier ones share the ring and addresses
    events = sj["events"]
    marked = max(i for i, e in enumerate(events) if e["kind"] == "MARK" and e["str"] == label)
    opened = max(i for i, e in enumerate(events[:marked])
                 if e["kind"] == "STORAGE_EXTERNAL" and int(e["addr"], 16) == old)
    freed = [e for e in events[opened:marked]
             if e["kind"] == "STORAGE_EXTERNAL_FREE" and int(e["addr"], 16) == old]
    assert len(freed) == 1
    innermost = python_frames(sj, freed[0]["stack"])[-1]
    assert innermost[:2] == [__file__, line] and innermost[2].endswith(".move"), innermost
    del t, src


def _cow(t) -> bool:
    return bool(torch._C._is_cow_tensor(t))


@pytest.mark.parametrize("busy", [False, True], ids=["observer", "observer busy: the mode"])
def test_copy_on_write_tensors_stay_copy_on_write_and_share_their_memory(
        real_lib, observer, monkeypatch, busy):
    # torch._lazy_clone: two StorageImpls on one memory until one is written.
    # Reading a storage's address through Python (data_ptr()) would give the
    # program copies it never made; the tracker reads it in C++
    # (trackobs_storage_now, the facts; torch._C._data_address for tensors),
    # also when the observer is busy (installed for another thread's tracker,
    # here by hand) and this tracker uses the mode; and it keeps the memory
    # open while either storage lives.
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    x = torch.arange(1000.)
    if busy:
        observer.install(lambda *a: None, lambda *a: None, _trackobs.op_for)
    try:
        with vtt.track(walk_fraction=None) as tr:
            assert tr.ops_seen_by == ("dispatch mode" if busy else "observer")
            z = _copy_on_write_steps(tr, x)
    finally:
        if busy:
            observer.uninstall()
    assert tr.errors == 0
    assert torch.equal(z, x * 2)


def test_the_memory_of_twins_is_freed_once_when_the_last_of_them_goes(real_lib, observer,
                                                                        monkeypatch, tmp_path):
    # The storage that opened the memory goes first: its twin holds it on.
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    with vtt.track(walk_fraction=None) as tr:
        x = torch.arange(1000.) * 1
        y = torch._lazy_clone(x)
        ptr = torch._C._data_address(x)
        sx, sy = (tr._storages[t.untyped_storage()._cdata] for t in (x, y))
        assert sx.declared and not sy.declared
        del x, sx
        vtt.mark("x gone")
        assert sy.declared and sy.twins is None and _cow(y)
        z = y + 1
        del y, sy
        vtt.mark("y gone")
    assert tr.errors == 0
    snap = str(tmp_path / "twins.vtsnap")
    vramtrace.snapshot(snap)
    events = json.loads(subprocess.run([vt_cli(), "json", snap, "--events"], check=True,
                                       capture_output=True, text=True).stdout)["events"]
    opened = max(i for i, e in enumerate(events)
                 if e["kind"] == "STORAGE_EXTERNAL" and int(e["addr"], 16) == ptr)
    after = [e["str"] if e["kind"] == "MARK" else e["kind"] for e in events[opened:]
             if e["kind"] == "MARK" or (e["kind"].startswith("STORAGE")
                                        and int(e["addr"], 16) == ptr)]
    assert after == ["STORAGE_EXTERNAL", "x gone", "STORAGE_EXTERNAL_FREE", "y gone"], after
    del z


def _copy_on_write_steps(tr, x):
    y = torch._lazy_clone(x)
    vtt.mark("a")           # the sweep reads every storage it knows
    z = y * 2               # a read leaves both as they are
    vtt.mark("b")
    assert _cow(x) and _cow(y)
    sx, sy = (tr._storages[t.untyped_storage()._cdata] for t in (x, y))
    assert sx.twins is sy.twins and sx.twins == {sx, sy}
    assert sx.declared != sy.declared       # the memory is open once
    y.add_(1)               # a write gives y memory of its own
    vtt.mark("c")
    assert _cow(x) and not _cow(y)
    assert sy.ptr == torch._C._data_address(y) != sx.ptr == torch._C._data_address(x)
    assert sx.twins is None and sy.twins is None and sx.declared and sy.declared
    assert torch.equal(y, x + 1)
    del y
    vtt.mark("d")
    assert _cow(x) and sx.declared
    return z


def test_an_op_that_makes_an_autograd_node_comes_with_its_sequence_number(observer):
    w = torch.ones(3, requires_grad=True)
    got = _observed(observer, lambda: w * 2, full=True)
    assert [g[0] for g in got] == ["aten.mul.Tensor"]
    assert got[0][4] == got[0][2][0].grad_fn._sequence_nr()


def test_an_op_that_raises_is_not_handed_over_and_raises_as_before(observer):
    a, b = torch.ones(2, 3), torch.ones(2, 3)

    def failing() -> None:
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            torch.mm(a, b)
        a.relu()

    assert [n for n, _ in _observed(observer, failing)] == ["aten.relu.default"]


def test_ops_inside_a_kernel_are_not_handed_over(observer):
    got = [n for n, _ in _observed(observer, lambda: torch.zeros(2, 3))]
    assert got == ["aten.zeros.default"]   # not its empty + zero_


# That the observer and the mode give the same findings on the leak shapes
# is tested in test_track_fast.py, which runs the mode's C path on them
# anyway (one run for both comparisons).


def _count_moved_by(loop) -> int:
    """How far ``loop()`` moves the cyclic collector's count (no
    collection in between: the threshold raised for the measurement)."""
    import gc
    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1 << 30)
    try:
        lift = [[] for _ in range(1000)]   # off the count's floor of 0
        before = gc.get_count()[0]
        loop()
        moved = gc.get_count()[0] - before
        del lift
    finally:
        gc.set_threshold(*threshold)
    return moved


def test_the_trackers_own_objects_are_kept_out_of_the_collectors_count(real_lib, observer,
                                                                       monkeypatch):
    """The collector runs when the count of container objects made less
    those freed passes a threshold. The tracker's records, weak references
    and callbacks (five objects per kept tensor) must not count, or each
    automatic collection comes after fewer of the program's allocations and
    a dropped reference cycle is freed at another step
    (scripts/vramtrace/native/trackfast/gc_schedule.c)."""
    import gc
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    keep = torch.zeros(8)
    outs = [None] * 300

    def program():
        for i in range(len(outs)):
            outs[i] = keep + 1   # a new tensor kept: one Python object each

    def emptied():
        for i in range(len(outs)):
            outs[i] = None

    program()   # warm (PyTorch's first-call caches)
    emptied()
    untracked = _count_moved_by(program)
    emptied()
    with vtt.track() as tr:
        assert tr._observer is observer
        assert vtt._fast_path._trackfast.GC_HELD, \
            "built without CPython's internal headers: nothing holds the count"
        # Warm: reading the stack gives the running frames Python objects
        # (the program's, counted, freed when each function returns); the
        # callers' ones (pytest's) are made here, not in the measurement.
        program()
        emptied()
        tracked = _count_moved_by(program)
        assert len(tr._by_tid) >= len(outs)   # records were made for them
        replaced = _count_moved_by(program)   # each kept tensor dies, its record too
    emptied()
    assert untracked >= len(outs)
    # As untracked but for one frame object (_count_moved_by's own, made
    # readable by the first op it runs, freed after it has measured); unheld,
    # the tracker's objects moved it by ~6 per op. The mode path is not
    # there yet (the differential suite's KNOWN entries).
    assert 0 <= tracked - untracked <= 1, (untracked, tracked)
    assert 0 <= replaced <= 1, replaced

    # inside a hold nothing counts and no collection starts
    token = vtt._fast_path._trackfast.gc_hold()
    runs = gc.get_stats()[0]["collections"]
    junk = [{} for _ in range(5000)]
    del junk
    assert gc.get_stats()[0]["collections"] == runs
    vtt._fast_path._trackfast.gc_release(token)
    assert gc.get_count()[0] == token

    # Two threads' holds interleave (a followed thread records an op while
    # another's hold has let the GIL go): the count stays held until the
    # last of them ends, then is what the first found. Before, the first
    # hold's end put the count back and the second's put the held count
    # back for good: no automatic collection ever again.
    fast = vtt._fast_path._trackfast
    first = fast.gc_hold()
    second = fast.gc_hold()
    fast.gc_release(first)             # out of order: the other thread's ends later
    junk = [{} for _ in range(5000)]
    del junk
    assert gc.get_stats()[0]["collections"] == runs and gc.get_count()[0] < 0
    fast.gc_release(second)
    assert gc.get_count()[0] == first


def _walked_at_depth(fast, depth: int, walk: bool) -> None:
    """``depth`` frames down, a holder walk's reading of every thread's
    frames and locals (what a tick's walk does inside an op), in a hold."""
    if depth:
        _walked_at_depth(fast, depth - 1, walk)
        return
    if walk:
        from vramtrace import _referrers
        token = fast.gc_hold()
        try:
            _referrers._Locals(frozenset())
        finally:
            fast.gc_release(token)


def test_a_walk_that_reads_the_programs_frames_leaves_the_count_as_untracked(real_lib):
    """Reading a running frame gives it a Python object that CPython keeps
    until the function returns, outside the walk's hold: each took one off
    the program's count. A tick inside backward() moved the count per step
    from 3 to 0 on the CPU under `run --track` (CI, the differential suite's
    the_collectors_count_moves_per_step_as_untracked[cpu];
    scripts/vramtrace/native/trackfast/gc_reads.c)."""
    fast = vtt._fast_path._trackfast_for(real_lib)
    assert fast is not None and fast.GC_HELD, "built without CPython's internal headers"
    for walk in (False, True):   # warm: this function's callers have their objects
        _count_moved_by(lambda: _walked_at_depth(fast, 8, walk))
    untracked = _count_moved_by(lambda: _walked_at_depth(fast, 8, False))
    walked = _count_moved_by(lambda: _walked_at_depth(fast, 8, True))
    # One more: _count_moved_by's own frame object, made by the walk, the
    # program's, freed after it measured. Before, untracked less 10: the
    # frame objects of the lambda and of _walked_at_depth's nine calls,
    # made uncounted in the hold and freed, counted, on return.
    assert walked == untracked + 1, (untracked, walked)


def test_a_walk_keeps_no_local_of_another_thread_alive(real_lib):
    """The walk reads another thread's locals through f_locals, which copies
    them into a dict cached on its frame, not emptied (that thread may be
    tracing; its values are its own). The dict the walk made is dropped when
    its hold ends: kept, it held the thread's locals after the thread
    deleted them, until its function returned (gc_reads.c)."""
    import threading
    import weakref
    fast = vtt._fast_path._trackfast_for(real_lib)
    assert fast is not None and fast.GC_HELD, "built without CPython's internal headers"
    walked, deleted = threading.Event(), threading.Event()
    seen: list = []

    class Held:
        pass

    def worker():
        obj = Held()
        seen.append(weakref.ref(obj))
        walked.wait(10)
        del obj
        seen.append(seen[0]() is None)   # freed as soon as its last name went
        deleted.set()

    th = threading.Thread(target=worker)
    th.start()
    while not seen:
        time.sleep(0.001)
    token = fast.gc_hold()
    try:
        from vramtrace import _referrers
        locs = _referrers._Locals(frozenset())
        assert id(seen[0]()) in locs.by_id   # the walk did read the thread's local
        del locs
    finally:
        fast.gc_release(token)
    walked.set()
    deleted.wait(10)
    th.join(10)
    assert seen[1:] == [True], "the walk's copy of the thread's locals kept its object alive"


def test_the_observers_use_count_reads_what_torchs_does(observer):
    # A storage left without tracked tensors is asked whether anything else
    # holds it (storages.c orphaned()) through the observer's C reader
    # (trackobs_storage_use_count) instead of torch._C._storage_Use_Count:
    # both read the same count, for a storage with and without a Python
    # object, held by more tensors, and gone.
    use_count = torch._C._storage_Use_Count
    ours = observer._lib.trackobs_storage_use_count
    x = torch.arange(10.)
    handle = x.untyped_storage()._weak_ref()
    try:
        seen = [(use_count(handle), ours(handle))]
        views = [x[1:], x[2:]]
        seen.append((use_count(handle), ours(handle)))
        s = x.untyped_storage()   # a Python object for the storage
        seen.append((use_count(handle), ours(handle)))
        del s, views, x
        seen.append((use_count(handle), ours(handle)))
    finally:
        torch.UntypedStorage._free_weak_ref(handle)
    assert [a for a, _ in seen] == [b for _, b in seen], seen
    assert seen[-1] == (0, 0) and seen[1][0] > seen[0][0], seen


def test_the_tracker_asks_storages_with_the_observers_reader_while_it_has_the_observer(
        observer, monkeypatch):
    # What the reader says decides whether a storage waits (held elsewhere)
    # or is freed: test_a_saved_result_is_released_at_the_first_op_after_the_
    # backward_that_freed_it and the storage tests run with it in place.
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")
    with vtt.track(walk_fraction=None) as tr:
        assert tr.ops_seen_by == "observer"
        assert tr._fast.use_counter == observer.use_count_address != 0
    assert tr.errors == 0
