"""track()'s op observer (scripts/vramtrace/native/trackobs/observer.cpp, vramtrace/_trackobs.py):
PyTorch's RecordFunction hook instead of the dispatch mode, where it builds
(VRAMTRACE_TRACK_OBSERVER=0 keeps the mode). Here: when the observer is used
instead of the mode (by default; the mode where it cannot be built, where
asked, or for a second thread tracking meanwhile), the threads whose ops it
records, and what it hands the tracker.

The observer must hand the tracker the ops the mode would have been given
(the parts of a decomposed op, not the op; nothing a kernel calls inside),
with their tensors as the mode gets them, and the facts of each tensor's
storage that Python would read. Built here at first use into
VRAMTRACE_CACHE_DIR (the meson test environment points it into the build
directory, so that one build serves the suite). The tracker's books of
storages through it: test_track_observer_storages.py; the cyclic
collector's count and collections: test_track_observer_collector.py."""

from __future__ import annotations

import os
import struct
import sys
import time
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))

torch = pytest.importorskip("torch")
import vramtrace.torch as vtt  # noqa: E402
from vramtrace import _trackobs  # noqa: E402
from bench_track import passthrough_mode, training_step  # noqa: E402


def _observed(observer, fn, full: bool = False) -> list:
    """(op name, args) of each op the observer hands over while fn() runs;
    full: (op name, args, outputs, facts, seq) of the owner thread's."""
    got: list = []
    observer.install(lambda f, a, o, facts, seq: got.append(
                         (str(f), a, o, facts, seq) if full else (str(f), a)),
                     lambda f, a, o, facts, stack, *uses: got.append(("engine " + str(f), a)),
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


class _HalfMade(torch.Tensor):
    """A tensor subclass without memory whose device is its
    __torch_dispatch__'s to say, and which runs an op before its __new__ has
    set what that reads: FakeTensor's shape (its device dispatched to
    Python; torch 2.11's FakeTensor.__new__ ran init_gpu_context's
    torch.empty before setting fake_mode)."""

    asked: list = []

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> "_HalfMade":
        self = torch.Tensor._make_subclass(cls, elem, False, dispatch_device=True,
                                           device_for_backend_keys=torch.device("cpu"))
        torch.ones(1)   # an op while it is half made
        self.made = True
        return self

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.asked.append(str(func))
        if func is torch.ops.prim.device.default:
            return torch.device("meta") if args[0].__dict__.get("made") else args[0].missing
        raise NotImplementedError(str(func))


@pytest.mark.parametrize("switch", ["1", "0"], ids=["observer", "mode"])
def test_a_half_made_subclass_without_memory_is_never_asked_its_device(real_lib, observer,
                                                                        monkeypatch, switch):
    """The recording asks nothing of a tensor that has no memory and speaks
    for itself in Python: its __torch_dispatch__ is the program's code, and
    a half-made one raised (torch 2.11's FakeTensor: "recording aten.detach
    failed: 'FakeTensor' object has no attribute 'fake_mode'", a warning the
    program had not had untracked)."""
    monkeypatch.setenv(_trackobs.ENV_SWITCH, switch)
    _HalfMade.asked.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with vtt.track() as tr:
            half = _HalfMade(torch.empty(4, device="meta"))
            errors = tr.errors
    assert half.made and errors == 0, [str(w.message) for w in caught]
    assert not [w for w in caught if "vramtrace" in str(w.message)]
    assert _HalfMade.asked == [], _HalfMade.asked


def test_a_torch_without_lookup_tells_decompositions_by_its_dispatch_table(observer):
    """Whether autograd runs an operator's decomposition (so that the mode,
    and the observer, see its parts) is read by OperatorHandle::lookup, which
    torch 2.14 has; a torch before it (the GPU image's 2.11) is read through
    its computed dispatch table's text (a line a key: where its kernel was
    registered, and which kind). On this torch both readings must give the
    same answer for every operator it has."""
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    differ, decomposed = [], 0
    for full in names:
        name, _, overload = full.partition(".")
        by_lookup = observer.decomposed_by(name, overload, False)
        by_table = observer.decomposed_by(name, overload, True)
        decomposed += by_lookup == 1
        if by_lookup != by_table:
            differ.append((full, by_lookup, by_table))
    assert len(names) > 1000 and not differ, differ[:20]
    assert observer.decomposed_by("aten::linear", "", True) == 1   # its autograd slot: math
    assert observer.decomposed_by("aten::mm", "", True) == 0       # an autograd kernel of its own
    assert 50 < decomposed < len(names) // 2, decomposed
    assert observer.decomposed_by("aten::no_such_operator", "", True) == -1
