"""vramtrace.torch.track() against a recording fake library: what it
records for tensors, uses, views, deaths, and holders at marks (the names
it gives them: test_track_names.py)."""

from __future__ import annotations

import gc
import os
import warnings

import pytest

torch = pytest.importorskip("torch")

import vramtrace  # noqa: E402
import vramtrace.torch as vtt  # noqa: E402
from conftest import made_by, new_by_name, storage_nbytes  # noqa: E402
from fakelib import FakeLib  # noqa: E402
from vramtrace._lib import TENSOR_SAVED_ONLY  # noqa: E402


def test_the_model_index_holds_the_models_alive_at_the_last_lookup(fake):
    """The models whose parameters and buffers are their state are found
    again at each lookup (a parameter not known yet): one that is gone
    leaves the index, which never grows with the models a program made.
    (Unbudgeted: with a budget, a lookup after the first waits for the
    walks' credit, which this program's microsecond steps never earn:
    test_the_models_are_looked_up_again_only_from_the_walks_budget.)"""
    first = torch.nn.Linear(4, 4)
    with vtt.track(walk_fraction=None) as tr:
        first(torch.ones(2, 4)).sum().backward()
        vtt.mark("a")
        assert [ref() for ref, _ in tr._model_state.values()] == [first]
        del first
        second = torch.nn.Linear(4, 4)          # its parameters unknown yet
        second(torch.ones(2, 4)).sum().backward()
        vtt.mark("b")
        assert [ref() for ref, _ in tr._model_state.values()] == [second]
        assert set(tr._model_of) == {id(p) for p in second.parameters()}


def test_every_input_and_output_is_a_use_with_the_callers_stack(fake):
    with vtt.track() as tr:
        a = torch.ones(4)
        b = a + a       # uses a (twice), b (its creation is its use)
    ida, idb = tr.tensor_id(a), tr.tensor_id(b)
    uses = fake.of("use")
    assert sum(1 for u in uses if u[1] == ida) >= 2
    assert not [u for u in uses if u[1] == idb]      # no second event for the creation
    new_b = [e for e in fake.of("tensor_new") if e[1] == idb][0]
    stack = new_b[6]
    assert [u[2] for u in uses if u[1] == ida][0] == stack   # the same op
    func, file, line = fake.stacks[stack][0]
    assert func.endswith("test_every_input_and_output_is_a_use_with_the_callers_stack")
    assert os.path.basename(file) == "test_track.py"


def test_nothing_asks_the_library_for_a_native_stack(fake):
    with vtt.track():
        a = torch.ones(64)
        b = a[:8] * 2
        del a, b
        gc.collect()
    # None would make the library unwind the interpreter's native stack.
    assert [e for e in fake.of("tensor_new") if e[6] is None] == []
    assert [e for e in fake.of("use") if e[2] is None] == []
    assert fake.storage_stacks and all(st is not None for _, _, st in fake.storage_stacks)
    assert all(st for kind, _, st in fake.storage_stacks if kind == "storage")


def test_storage_release_carries_the_python_stack_of_the_last_death(fake):
    with vtt.track():
        x = torch.ones(16) * 3
        _, ptr = storage_nbytes(x)
        del x           # the storage dies here
    frees = [st for kind, p, st in fake.storage_stacks if kind == "storage_free" and p == ptr]
    assert len(frees) == 1 and frees[0]
    func, file, _ = fake.stacks[frees[0]][0]
    assert func.endswith("test_storage_release_carries_the_python_stack_of_the_last_death")
    assert os.path.basename(file) == "test_track.py"


def test_output_dying_before_the_next_op_is_recorded_then_dropped(fake):
    with vtt.track():
        a = torch.ones(8)
        n0 = len(fake.of("tensor_new"))
        tmp = a * 2
        assert not new_by_name(fake, "aten.mul out[0]")   # held back for a name
        del tmp                  # dies before any other op records it
        b = a + 1
    news = fake.of("tensor_new")[n0:]
    mul = [e for e in news if made_by(e[5], "aten.mul out[0]")]
    assert len(mul) == 1
    i_new = fake.events.index(mul[0])
    i_drop = fake.events.index(("drop", mul[0][1]))
    assert i_new < i_drop
    del b


def test_stacks_are_interned_once_per_call_site(fake):
    with vtt.track():
        x = torch.ones(4)
        for _ in range(50):
            x = x * 1.0
    assert len(fake.stacks) <= 4   # ones, mul (+ nothing per iteration)


def test_death_drops_tensor_and_frees_storage_after_last_view(fake):
    with vtt.track() as tr:
        big = torch.zeros(100, 100)
        view = big[:, :10]
    ibig, iview = tr.tensor_id(big), tr.tensor_id(view)
    _, ptr = storage_nbytes(big)
    del big
    gc.collect()
    assert ("drop", ibig) not in fake.events  # the view keeps its base alive (_base)
    del view
    gc.collect()
    kinds = [e for e in fake.events if e[0] in ("drop", "storage_free")]
    assert ("drop", iview) in kinds and ("drop", ibig) in kinds
    assert kinds[-1] == ("storage_free", ptr)


def test_a_library_older_than_the_package_tracks_nothing_and_says_why():
    # track() needs the library's C entry points, vt_tensor_name (format
    # 1.1) among them: without, the block runs as without vramtrace.
    class Old(FakeLib):
        def raw(self, name):
            return None if name == "vt_tensor_name" else super().raw(name)
    lib = Old()
    old = vramtrace.set_library(lib)
    try:
        from vramtrace.torch import _tracker
        _tracker._said_blind = False
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with vtt.track() as tr:
                h = torch.ones(3) * 2
                vtt.name(h, "fc2 out")
            assert h.tolist() == [2.0, 2.0, 2.0]
        assert tr.ops == 0 and tr.tensor_id(h) == 0 and lib.events == []
        said = [str(m.message) for m in w if "vramtrace" in str(m.message)]
        assert len(said) == 1 and "records nothing" in said[0] and "vt_tensor_name" in said[0], \
            said
    finally:
        vramtrace.set_library(old)


class Context:
    def __init__(self):
        self.output_tensors = []


def test_mark_records_the_holders_of_stale_tensors(fake):
    ctx = Context()
    with vtt.track(walk_fraction=None) as tr:
        vtt.mark("step 0")
        y = torch.ones(8) * 3
        z = torch.ones(8) * 4
        ctx.output_tensors += [y, z]
        del y
        vtt.mark("step 1")
        vtt.mark("step 2")
    iz = tr.tensor_id(z)
    paths = fake.paths_to(iz)
    assert any("Context .output_tensors -> list [1] -> " in p for p in paths), paths
    # the refs were recorded before the mark that found them stale
    events = [e[0] if e[0] != "mark" else e for e in fake.events]
    first_ref = events.index("ref")
    assert events.index(("mark", "step 1")) < first_ref < events.index(("mark", "step 2"))


def test_a_mark_leaves_host_tensors_to_the_snapshot_when_a_device_is_in_use(fake, tmp_path):
    """A program that uses the device: its stale CPU tensors (results it
    keeps on the host, which `check` judges only with --host) are not walked
    at marks, but at the snapshot; a CPU program's are walked at marks."""
    ctx = Context()
    with vtt.track(walk_fraction=None) as tr:
        w = torch.ones(8, device="cuda") * 2       # the device in use
        vtt.mark("step 0")
        ctx.output_tensors.append(torch.ones(8) * 3)   # kept on the host
        host = tr.tensor_id(ctx.output_tensors[0])
        vtt.mark("step 1")
        vtt.mark("step 2")
        vtt.mark("step 3")
        assert not any(dst == host for (_, dst) in fake.live_refs()), fake.live_refs()
        assert tr.host_deferred > 0
        vramtrace.snapshot(str(tmp_path / "s.vtsnap"))
        assert any("Context .output_tensors -> list [0] -> " in p
                   for p in fake.paths_to(host)), fake.paths_to(host)
        del w
    ctx.output_tensors.clear()
    with vtt.track(walk_fraction=None) as tr:   # no device: walked at a mark
        vtt.mark("step 0")
        ctx.output_tensors.append(torch.ones(8) * 3)
        host = tr.tensor_id(ctx.output_tensors[0])
        vtt.mark("step 1")
        vtt.mark("step 2")
        assert any(dst == host for (_, dst) in fake.live_refs())
        assert tr.host_deferred == 0


def test_a_marks_work_keeps_the_gil_a_while_and_puts_the_interval_back(fake):
    """While a mark works, another Python thread is handed the GIL after a
    second of it at most, not every 5 ms: what such a thread makes or frees
    while the collector's count is held is lost from the program's count
    (the autograd engine's device thread releasing a graph moved it under
    `run --track`). The program's own interval is put back after."""
    import sys

    from vramtrace.torch import _marks
    seen = []
    before = sys.getswitchinterval()
    with vtt.track() as tr:
        sweep = tr._sweep

        def noting(forced=False):
            seen.append(sys.getswitchinterval())
            sweep(forced)
        tr._sweep = noting
        vtt.mark("a")
        assert sys.getswitchinterval() == before
        sys.setswitchinterval(2.0)        # the program's own, longer: kept
        vtt.mark("b")
        assert sys.getswitchinterval() == 2.0
        sys.setswitchinterval(before)
    assert seen == [_marks._MARK_SWITCH_S, 2.0], seen

def test_a_walk_declares_its_holders_again_once_half_the_ring_passed(fake):
    """A run longer than the ring overwrites the walk that declared a
    holder; a snapshot taken without a walk of its own (a signal's, an
    OOM's) would show its chains from a nameless holder. So a walk at a
    mark declares again all it finds (its holders' names, its references)
    once the program has recorded half a ring since the last time, and not
    before."""
    ctx = Context()

    def names_declared():
        holders = {e[1] for e in fake.of("holder")}
        return [e for e in fake.of("tensor_name") if e[1] in holders]
    with vtt.track(walk_fraction=None) as tr:
        fake.window = (100, 1000)
        vtt.mark("step 0")
        for i in range(1, 5):   # a fresh stale tensor at each mark from step 2 on
            ctx.output_tensors.append(torch.ones(8) * i)
            vtt.mark(f"step {i}")
        walks = tr.walks
        assert walks >= 2 and fake.of("ref") and not names_declared(), fake.events
        fake.window = (600, 1000)          # half the ring since the start
        ctx.output_tensors.append(torch.ones(8) * 5)
        vtt.mark("step 5")
        vtt.mark("step 6")
        said = names_declared()
        assert tr.walks > walks and {e[2] for e in said} >= {"Context", "list"}, fake.events
        fake.window = (900, 1000)          # less than half a ring since
        ctx.output_tensors.append(torch.ones(8) * 6)
        vtt.mark("step 7")
        vtt.mark("step 8")
        assert len(names_declared()) == len(said), fake.events
        fake.window = (1200, 1000)
        ctx.output_tensors.append(torch.ones(8) * 7)
        vtt.mark("step 9")
        vtt.mark("step 10")
        assert len(names_declared()) > len(said), fake.events


def test_the_tensors_are_declared_again_once_half_the_ring_passed_and_at_a_snapshot_past_it(
        fake, tmp_path):
    """A run longer than the ring overwrites the TENSOR_NEW of what the
    program made early and still holds; `check` would then see its storage
    and no tensor. So a mark declares every recorded tensor the books hold
    again (vt_tensor_again: its id, where it is, its base, its name, the
    stack it was made at) once half a ring was recorded since the last
    time, and a snapshot does when the ring overwrote the run's start."""
    ctx = Context()
    with vtt.track(walk_fraction=None) as tr:
        fake.window = (100, 1000)
        kept = torch.ones(8) * 3                  # an early tensor the program keeps
        ctx.output_tensors.append(kept)
        every_third = torch.ones(8) * 4           # used every third step
        vtt.mark("step 0")
        vtt.mark("step 1")
        vtt.mark("step 2")
        every_third.add_(1)
        vtt.mark("step 3")
        new = {e[1]: e for e in fake.of("tensor_new")}
        tid = tr._by_obj[id(kept)].tid
        assert not fake.of("again")
        fake.window = (600, 1000)                 # half the ring since the start
        vtt.mark("step 1")
        again = {e[1]: e for e in fake.of("again")}
        assert tid in again and len(again) == tr.declared_again, fake.events
        # as its TENSOR_NEW said, the stack included
        _, _, ptr, nbytes, base, name, stack, rest = again[tid]
        assert rest == 0                          # made in step 0, no use since
        # the most marks a tensor rested before a use: its usual gap
        assert again[tr.tensor_id(every_third)][7] == 2, again
        assert (ptr, nbytes, base, name) == new[tid][2:6]
        assert stack == new[tid][6] and stack
        # dropped tensors are not declared: only what the books hold
        assert set(again) <= set(tr._by_tid), (again, tr._by_tid)
        n = len(fake.of("again"))
        fake.window = (900, 1000)                 # less than half a ring since
        vtt.mark("step 2")
        assert len(fake.of("again")) == n
        vramtrace.snapshot(str(tmp_path / "in.vtsnap"))   # the ring kept everything
        assert len(fake.of("again")) == n
        fake.window = (1050, 1000)                # the ring overwrote the start
        vramtrace.snapshot(str(tmp_path / "past.vtsnap"))
        assert tid in {e[1] for e in fake.of("again")[n:]}, fake.events
        del kept, every_third


def test_a_program_without_marks_declares_its_tensors_rests_in_nanoseconds(fake):
    """A program that never marks is judged by time, and ticks (every
    tick_s of its ops) stand for its marks: a tensor declared again carries
    the longest rest it took between uses in ns (ticks x tick_s), which
    `check`'s time rule reads; a marking program's are in marks."""
    with vtt.track(walk_fraction=None) as tr:
        fake.window = (100, 1000)
        every_third = torch.ones(8) * 4
        tr._tick()
        tr._tick()
        tr._tick()
        every_third.add_(1)                       # rested 2 ticks (as in the marks' case)
        tr._tick()
        fake.window = (600, 1000)
        tr._tick()
        again = {e[1]: e for e in fake.of("again")}
        tid = tr.tensor_id(every_third)
    assert again[tid][7] == 2 * int(tr.tick_s * 1e9), again[tid]
    del every_third


def test_a_view_of_a_detached_tensor_holds_the_detached_tensor(fake):
    """``out.detach()[:, 0]`` kept: the detached tensor is no view (it
    only shares out's storage), and the select's ``_base`` is the detached
    tensor, which lives on through it. A walk links the select to the
    detached tensor (``._base``), not to ``out`` its record names as the
    storage's first tensor. (Held by nothing else, the detached tensor is
    dropped at the mark, as a base only views keep; here the program also
    names it, so it stays and is walked.)"""
    ctx = Context()
    with vtt.track(walk_fraction=None) as tr:
        vtt.mark("step 0")
        out = torch.ones(8, 8) * 2
        ctx.output_tensors.append(out.detach()[:, 0])
        del out
        col = ctx.output_tensors[0]
        ctx.detached = col._base
        det_tid, col_tid = tr.tensor_id(ctx.detached), tr.tensor_id(col)
        assert det_tid and col_tid and det_tid != col_tid
        vtt.mark("step 1")
        vtt.mark("step 2")
        refs = dict.fromkeys(fake.live_refs())
    assert (col_tid, det_tid) in refs, fake.events
    assert any(dst == col_tid and fake.names.get(src) == "list" for (src, dst) in refs)
    del col


def test_released_holder_is_retracted_at_the_next_mark(fake):
    ctx = Context()
    with vtt.track(walk_fraction=None) as tr:
        vtt.mark("step 0")
        ctx.output_tensors.append(torch.ones(8) * 3)
        keep = ctx.output_tensors[0]
        vtt.mark("step 1")
        vtt.mark("step 2")
        refs_before = dict(fake.live_refs())
        ctx.output_tensors.clear()
        vtt.mark("step 3")
    tid = tr.tensor_id(keep)
    assert any(dst == tid for (_, dst) in refs_before)
    assert not any(dst == tid and fake.names.get(src) == "list"
                   for (src, dst) in fake.live_refs())
    del keep


def test_automatic_collection_records_cycle_holder_before_drop(fake):
    class Node:
        pass
    with vtt.track() as tr:
        a, b = Node(), Node()
        a.o, b.o = b, a
        a.t = torch.ones(4) * 2
        tid = tr.tensor_id(a.t)
        del a, b
        gc.collect()
    i_ref = [i for i, e in enumerate(fake.events)
             if e[0] == "ref" and e[2] == tid and fake.names[e[1]] == vtt.CYCLE_HOLDER]
    i_drop = fake.events.index(("drop", tid))
    assert i_ref and i_ref[0] < i_drop
    # the holder says it is a collection (VT_HOLDER_GC_COLLECTION): the
    # checker's evidence that gc, not refcounting, freed the tensor
    assert fake.events[i_ref[0]][1] in fake.gc_holders


def test_collect_cycles_at_mark_describes_the_cycle(fake, no_gc):
    class Node:
        pass
    with vtt.track(collect_cycles=True, walk_fraction=None) as tr:
        a, b = Node(), Node()
        a.o, b.o = b, a
        a.t = torch.ones(4) * 2
        tid = tr.tensor_id(a.t)
        del a, b
        vtt.mark("step 1")
    paths = fake.paths_to(tid)
    assert any(p.startswith(vtt.CYCLE_HOLDER) and "Node .t -> " in p for p in paths), paths
    assert ("drop", tid) in fake.events
    # the collection also names the tensor it freed, directly
    assert any(e[0] == "ref" and e[1] in fake.gc_holders and e[2] == tid for e in fake.events)


def test_a_head_a_model_grows_later_is_named_by_the_model_and_unnamed_when_dropped(fake):
    """A mark looks the models up (a pass over the collector's objects) at
    most once, for the first parameter it finds unknown: a head the model
    gains at a later step is named as the model knows it, however many
    known parameters the mark asks about before it (the first ask of every
    mark, a known one, once used up the mark's lookup). A head the model
    drops, kept by its optimizer, is named again by the line that first
    used it, not by the place it left."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(4, 8)
            self.heads = torch.nn.ModuleList()

        def forward(self, x):
            return self.heads[-1](self.body(x).relu())

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def step(i):
        vtt.mark(f"step {i}")
        net.heads.append(torch.nn.Linear(8, 2))
        opt.add_param_group({"params": net.heads[-1].parameters()})
        opt.zero_grad()
        net(torch.randn(3, 4)).sum().backward()   # grads the next mark names first
        opt.step()

    with vtt.track(walk_fraction=None) as tr:
        step(0)
        first = fake.names[tr.tensor_id(net.heads[0].weight)]   # before any lookup
        assert first.startswith("parameter, first used by"), first
        for i in range(1, 4):
            step(i)
        vtt.mark("after")
        names = {n: fake.names[tr.tensor_id(p)] for n, p in net.named_parameters()}
        assert names == {n: f"Net.{n}" for n, _ in net.named_parameters()}, names
        dropped = net.heads[0].weight   # the optimizer keeps it; no module holds it
        del net.heads[0]
        step(4)
        vtt.mark("end")
        assert fake.names[tr.tensor_id(dropped)] == first
        assert fake.names[tr.tensor_id(net.heads[-1].weight)] == "Net.heads.3.weight"
        # a head another model takes over is named as that one knows it
        other = torch.nn.Sequential(net.heads[0])
        del net.heads[0]
        step(5)
        vtt.mark("last")
        assert fake.names[tr.tensor_id(other[0].weight)] == "Sequential.0.weight"
    assert tr.model_lookups <= 7   # one a mark at most


def test_the_models_are_looked_up_again_only_from_the_walks_budget(fake):
    """After the first lookup of the models, a mark looks them up again (a
    pass over the collector's objects) only when the walks' budget has the
    time for it: a program that makes a parameter every step does not pay
    a heap pass a step; its later heads keep their first-sight names."""
    net = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
    with vtt.track(walk_fraction=1e-9) as tr:
        for i in range(6):
            vtt.mark(f"step {i}")
            net.append(torch.nn.Linear(4, 4))
            net[-1](net[0](torch.randn(2, 4))).sum().backward()
        vtt.mark("end")
        assert tr.model_lookups == 1
        assert fake.names[tr.tensor_id(net[0].weight)] == "ModuleList.0.weight"
        assert fake.names[tr.tensor_id(net[-1].weight)].startswith("parameter, first used by")


def test_autograd_saved_tensor_is_named(fake):
    keep = []
    with vtt.track(walk_fraction=None) as tr:
        w = torch.randn(4, 4, requires_grad=True)
        vtt.mark("step 0")
        a = torch.randn(4, 4)
        keep.append(a @ w)          # MmBackward0 saves `a`
        ia = tr.tensor_id(a)
        del a
        vtt.mark("step 1")
        vtt.mark("step 2")
    paths = fake.paths_to(ia)
    assert any("MmBackward0 SavedTensor 'self' of MmBackward0" in p for p in paths), paths
    assert any(p.startswith("list [0] -> ") or p.startswith("frame ") for p in paths), paths


@pytest.mark.parametrize("near", [8, 0], ids=["near", "newest first only"])
def test_a_saved_tensor_under_a_deep_graph_is_found_from_the_op_that_saved_it(
        fake, monkeypatch, near):
    """A graph kept across batches is thousands of nodes. Walked from the
    newest tensor down within its budget, the node that saved an early
    tensor is never reached; the tensors recorded right after it, the
    outputs of the op that saved it, lead there in one step (their grad_fn):
    looked at first (_walks._NEAR_TENSORS). Here a budget without a deadline
    and a chain of 3,000 nodes, newer than the node, that spends it."""
    from vramtrace.torch import _autograd_graph, _walks
    monkeypatch.setattr(_autograd_graph._GradGraphWalk, "_more", lambda self: self.budget > 0)
    monkeypatch.setattr(_walks, "_NEAR_TENSORS", near)
    with vtt.track(walk_fraction=None) as tr:
        w = torch.randn(4, 4, requires_grad=True)
        vtt.mark("step 0")
        a = torch.randn(4, 4)
        first = a @ w               # MmBackward0 saves `a`
        ia = tr.tensor_id(a)
        del a
        y = first
        for _ in range(3000):
            y = y + 1               # AddBackward0 nodes, newer than MmBackward0
        kept = [first, y]
        vtt.mark("step 1")
        vtt.mark("step 2")
    paths = fake.paths_to(ia)
    found = any("MmBackward0 SavedTensor 'self' of MmBackward0" in p for p in paths)
    assert found == (near > 0), paths
    del kept


def test_the_fake_library_is_recorded_through_the_c_path_users_run(fake):
    with vtt.track() as tr:
        x = torch.ones(3) + 1
    assert tr._fast is not None and tr._fast.ops >= 1
    assert fake.of("tensor_new") and x.tolist() == [2.0, 2.0, 2.0]


def test_recording_failures_never_break_the_program():
    # The library refusing a host storage (an error code, as the real
    # one returns for bad arguments) fails that op's recording.
    class Broken(FakeLib):
        def storage_external(self, ptr, nbytes, device, stack=None):
            return -22
    lib = Broken()
    old = vramtrace.set_library(lib)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with vtt.track() as tr:
                x = torch.ones(3) + 1
            assert x.tolist() == [2.0, 2.0, 2.0]
            assert tr.errors >= 1
            assert any("vramtrace.torch" in str(m.message) for m in w)
    finally:
        vramtrace.set_library(old)


def test_tracking_stops_recording_uses_after_the_block(fake):
    with vtt.track():
        x = torch.ones(3)
    n = len(fake.of("use"))
    y = x + 1
    assert len(fake.of("use")) == n
    del y


def test_nested_track_records_each_tensor_and_storage_once(fake):
    with vtt.track() as outer:
        with vtt.track() as inner:
            x = torch.ones(3) * 2
        assert inner is outer          # the running tracker goes on
        y = x + 1
        # re-entering the running tracker is nested too
        with outer:
            z = y - 1
        w = z * 3
    # Each storage is declared once while it lives (an address the
    # allocator reuses after a free is a new storage, declared again).
    live = set()
    for e in fake.events:
        if e[0] == "storage":
            assert e[1] not in live, fake.events
            live.add(e[1])
        elif e[0] == "storage_free":
            live.discard(e[1])
    ids = [(e[2], e[5]) for e in fake.of("tensor_new")]
    assert len(ids) == len(set(ids)), ids
    for op in ("aten.mul out[0]", "aten.add out[0]", "aten.sub out[0]"):
        assert new_by_name(fake, op), op
    # the outer block still ended: no use after it
    n = len(fake.of("use"))
    v = w + 1
    assert len(fake.of("use")) == n
    del v


def test_a_tracker_records_the_ops_of_its_own_thread_only(fake):
    import threading
    seen = []
    with vtt.track() as tr:
        def work():
            seen.append((torch.ones(4) * 2).sum().item())
        t = threading.Thread(target=work)
        t.start()
        t.join()
        ops_before = tr.ops
        x = torch.ones(2) + 1
    assert seen == [8.0]
    assert ops_before == 0 and tr.ops >= 1
    del x


def test_tensors_without_plain_storage_are_skipped_quietly(fake):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with vtt.track() as tr:
            m = torch.empty(4, 4, device="meta")
            n = m @ m
            idx = torch.tensor([[0, 1], [1, 0]])
            s = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0]), (2, 2))
            d = s.to_dense() + 1
            e = torch.zeros(0) + 1
            try:
                torch.ones(2, 3) @ torch.ones(2, 3)   # an op that raises
            except RuntimeError:
                pass
            f = torch.ones(2) * 3
    assert tr.errors == 0
    assert n.shape == (4, 4) and d.shape == (2, 2) and e.numel() == 0
    assert tr.tensor_id(m) == 0 and tr.tensor_id(f) > 0


def test_real_library_records_python_stacks_and_no_native_ones(real_lib, tmp_path):
    import json
    import subprocess
    cli = os.environ.get("VRAMTRACE_CLI")
    if not cli:
        pytest.skip("VRAMTRACE_CLI not set (run through meson test)")
    # the ring holds what this process recorded before (other tests of a
    # pytest run in one process): only what follows this mark is this test's
    start = f"python stacks test {os.getpid()} {id(tmp_path)}"
    vramtrace.mark(start)
    with vtt.track():
        a = torch.ones(64)
        b = vtt.name(a[:8] * 2, "b out")
        c = b + 1
        del b, c
    out = str(tmp_path / "t.vtsnap")
    vramtrace.snapshot(out)
    r = subprocess.run([cli, "json", out, "--events"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    frames, nodes = d["frames"], d["stacks"]

    def modules(sid):
        mods = []
        while sid:
            sid, f = nodes[sid]
            mods.append(frames[f]["module"])
        return mods

    this = os.path.basename(__file__)
    seen = set()
    marks = [i for i, e in enumerate(d["events"]) if e["kind"] == "MARK" and e["str"] == start]
    assert len(marks) == 1, marks
    events = d["events"][marks[0] + 1:]
    for e in events:
        kind = e["kind"]
        if kind in ("TENSOR_NEW", "TENSOR_USE", "STORAGE_EXTERNAL", "STORAGE_EXTERNAL_FREE"):
            mods = modules(e["stack"])
            assert mods and set(mods) == {"python"}, (kind, mods)
            sid = e["stack"]
            assert os.path.basename(frames[nodes[sid][1]]["file"]) == this
            seen.add(kind)
        elif kind in ("TENSOR_DROP", "HOLDER_NEW"):
            assert e["stack"] == 0, e
    assert seen == {"TENSOR_NEW", "TENSOR_USE", "STORAGE_EXTERNAL", "STORAGE_EXTERNAL_FREE"}
    named = [e for e in events if e["kind"] == "TENSOR_NEW" and e["str"] == "b out"]
    assert len(named) == 1
    assert not [e for e in events if e["kind"] == "TENSOR_NEW"
                and made_by(e["str"], "aten.mul out[0]")]


def test_a_models_weights_read_once_under_autocast_stay_its_state(fake, tmp_path):
    """Under autocast PyTorch casts a weight once and keeps the cast for the
    region (its weight cache): in an inference loop the parameters are read
    by the first step only, while the model runs on. They are its state:
    the tick whose lookup finds the model follows it then, and a snapshot
    follows the models used since the last tick or mark (the weights of a
    sampling run that ended before a second tick were flagged as lingering:
    nanoGPT's sample.py)."""
    import time
    nn = torch.nn
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8, bias=False))
    idx = torch.zeros(2, 3, dtype=torch.long)

    def uses(tid):
        return len([e for e in fake.of("use") if e[1] == tid])

    with vtt.track() as tr, torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        tr._fast.tick_s = 0.5      # longer than the tick's own work (a heap pass)
        model(idx)
        weight = tr.tensor_id(model[1].weight)
        assert weight
        read = uses(weight)               # by the cast, which autocast keeps
        end = time.perf_counter() + 10
        while tr.epoch == 0 and time.perf_counter() < end:
            model(idx)
        tr._fast.tick_s = 0               # no tick after this one: the run ends first
        assert tr.epoch == 1, tr.epoch
        # the tick named the weight as its model knows it, and used it with it
        assert ("tensor_name", weight, "Sequential.1.weight") in fake.events, fake.of("tensor_name")
        assert uses(weight) == read + 1, (read, fake.of("use"))
        for _ in range(3):
            model(idx)
        assert uses(weight) == read + 1   # the cast is kept: the weight is not read
        vramtrace.snapshot(str(tmp_path / "s.vtsnap"))
        # the embedding was used since the tick: its model's weight with it
        assert uses(weight) == read + 2


def test_a_tensor_no_op_showed_is_found_on_memory_whose_tensors_died(fake):
    """A compiled graph's output is made by inductor's generated code
    (reinterpret_tensor of an mm's buffer, which bypasses the dispatcher):
    no op shows it, and the books know its memory only through the tensor
    an op made there, which died. nanoGPT's compiled model's logits kept in
    a list had "no holder recorded". At a walk, a heap pass finds such
    tensors on the stale storages kept without a known tensor: each is
    recorded as found (VT_TENSOR_SAVED_ONLY: its making is no use) and
    walked from, so the list is named, and the tensor by the line whose op
    made its memory (before: by its shape alone)."""
    from torch._C._dynamo.guards import _reinterpret_tensor
    kept = []
    with vtt.track(walk_fraction=None) as tr:
        for i in range(3):
            vtt.mark(f"step {i}")
            buf = torch.ones(64, 16) * i          # an op made it: recorded
            kept.append(_reinterpret_tensor(buf, (4, 16, 16), (256, 16, 1), 0))
            del buf                               # its record dies, its memory lives
        vtt.mark("step 3")
        vtt.mark("end")
        assert tr.tensors_found >= 2, tr.tensors_found
        tid = tr.tensor_id(kept[0])
        assert tid, "the kept tensor is not in the books"
    found = [e for e in fake.events if e[0] == "tensor_new" and e[1] == tid]
    assert found and found[0][4] == TENSOR_SAVED_ONLY, found
    # named, and made, at the line of the op that made its memory
    line = next(i for i, text in enumerate(open(__file__), 1)
                if "buf = torch.ones(64, 16) * i" in text)
    assert found[0][5].startswith("buf = torch.ones(64, 16) * i") and found[0][5].endswith(
        f"(test_track.py:{line}, tensor (4, 16, 16) float32, made where no op showed it)"), found
    assert found[0][6] != 0, found
    assert "list" in [fake.names.get(src) for (src, dst) in fake.live_refs() if dst == tid], \
        fake.paths_to(tid)
    assert tr.errors == 0


def test_saved_attributes_are_read_while_their_tensors_live_and_never_unpacked():
    """A walk reads an autograd node's saved tensors only while they live,
    and never by unpacking through the program's saved-tensor hook: where a
    pack hook made one, what it returned is read as packed (a SavedTensor's
    data), the unpack hook never called. A spent graph's (its backward ran)
    raise when read: a list keeping each batch's LSTM output of
    pytorch/examples' word_language_model kept 276 spent graphs, and the
    snapshot's walk spent 5 s raising. Attributes that save no tensor
    (sizes, dims) are read."""
    from vramtrace.torch._autograd_graph import _saved_values
    x = torch.randn(4, 4, requires_grad=True)
    y = (x * 2).sin()
    spent = y.grad_fn
    vals, packed = _saved_values(spent, "_saved_self")
    assert len(vals) == 1 and torch.equal(vals[0], x * 2) and not packed
    unpacked = []

    def unpack(t):
        unpacked.append(t)
        return t
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, unpack):
        hooked = (x * 3).sin()
    vals, packed = _saved_values(hooked.grad_fn, "_saved_self")
    assert packed and len(vals) == 1 and vals[0] is kept[0], (vals, kept)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: ("on", t.detach()), unpack):
        pair = (x * 4).cos()
    vals, packed = _saved_values(pair.grad_fn, "_saved_self")   # tensors in a tuple
    assert packed and len(vals) == 1 and torch.equal(vals[0], x * 4), vals
    assert unpacked == []
    y.sum().backward()
    assert _saved_values(spent, "_saved_self") == ((), False)
    with pytest.raises(RuntimeError):
        spent._saved_self          # what reading it would have done
    summed = x.sum(0)
    assert summed.grad_fn._saved_dim is not None
    vals, packed = _saved_values(summed.grad_fn, "_saved_dim")
    assert list(vals) == list(summed.grad_fn._saved_dim) and not packed, vals


def test_a_tensors_death_drops_its_references_from_every_scope_and_no_others(fake):
    """The references a scope asserted, kept to retract those a later walk
    does not find again: a tensor that died has its own dropped from every
    scope (its death ended them), the others are retracted as before."""
    from vramtrace._holders import HolderBook
    from vramtrace._referrers import Edge, WalkResult
    book = HolderBook(fake)
    t = lambda i: ("t", i)   # noqa: E731  (a tensor's node is its id)
    book.emit(WalkResult(edges=[Edge(t(1), t(2), "a"), Edge(t(3), t(2), "b"),
                                Edge(t(1), t(4), "c")]), "stale")
    book.emit(WalkResult(edges=[Edge(t(5), t(2), "d"), Edge(t(5), t(6), "e")]), "other")
    book.forget_target(2)
    book.forget_target(7)    # never a target: nothing
    fake.events.clear()
    book.emit(WalkResult(edges=[]), "stale")
    book.emit(WalkResult(edges=[]), "other")
    assert sorted(e[1:] for e in fake.events if e[0] == "unref") == [(1, 4), (5, 6)]


@pytest.mark.parametrize("whole_up_to", [10 ** 9, 64], ids=["whole", "bounded"])
def test_graphs_that_all_reach_one_kept_tensor_assert_one_chain_to_it_beyond_a_bound(
        fake, monkeypatch, whole_up_to):
    """Forty kept graphs of twelve nodes each reach one leaf nothing else
    holds (its AccumulateGrad keeps it: pytorch/examples' word_language_model
    keeps each batch's output, and 276 spent LSTM graphs reach the replaced
    model's parameters). Within _WHOLE_CHAINS_UP_TO edges every chain is
    asserted; beyond it, one shortest chain to the leaf: from a kept output
    down to its AccumulateGrad, not the 480 nodes of all the graphs."""
    from vramtrace.torch import _autograd_graph
    monkeypatch.setattr(_autograd_graph, "_WHOLE_CHAINS_UP_TO", whole_up_to)
    xs = [torch.randn(2, 4) for _ in range(40)]
    with vtt.track(walk_fraction=None) as tr:
        w = torch.randn(4, 4, requires_grad=True)
        vtt.mark("step 0")
        kept = []
        for x in xs:
            y = x @ w
            for _ in range(10):
                y = y * 1.5
            kept.append(y)
        iw = tr.tensor_id(w)
        del w, y
        vtt.mark("step 1")
        vtt.mark("step 2")
    nodes = {e[1] for e in fake.of("ref") if fake.names.get(e[1], "").endswith("Backward0")}
    paths = [p for p in fake.paths_to(iw, max_len=20) if " variable -> " in p]
    assert paths and all(p.startswith("frame local 'kept'") and "-> list [" in p
                         for p in paths), paths[:3]
    if whole_up_to > 10 ** 6:
        assert len(nodes) >= 40 * 11, len(nodes)
    else:
        assert len(paths) == 1 and len(nodes) == 11, (len(nodes), paths)
    del kept


def test_a_storage_refusing_its_pointer_is_alive_also_where_pytorch_cannot_say_so(monkeypatch):
    """cudagraph trees make an output a later replay overwrote refuse its data
    pointer, and a mark's sweep reads every tracked storage's: such a storage
    is alive at an address that cannot be read (True), never a failed walk.
    PyTorch 2.11 has no torch._C._storage_throw_on_immutable_data_ptr to say
    so; there every mark's walk failed with a RuntimeWarning the program had
    not had untracked (the differential suite's
    compile_reduce_overhead_keeps_outputs on the dispatch mode's path)."""
    from vramtrace._storage_life import StorageLife
    t = torch.ones(4)
    st = t.untyped_storage()
    life = StorageLife(torch)
    handle = st._weak_ref()
    try:
        assert life.now(handle) == (st.data_ptr(), 16)
        torch._C._set_storage_data_ptr_access_error_msg(st._cdata, "overwritten by a replay")
        assert life.now(handle) is True
        monkeypatch.delattr(torch._C, "_storage_throw_on_immutable_data_ptr", raising=False)
        assert life.now(handle) is True
    finally:
        torch.UntypedStorage._free_weak_ref(handle)
