"""track()'s books of storages through the op observer
(scripts/vramtrace/native/trackobs/observer.cpp, vramtrace/_trackobs.py;
native/trackfast/storages.c), most cases also through the dispatch mode
(VRAMTRACE_TRACK_OBSERVER=0): a storage's release is recorded at the first
op, or the collection, after what held it let go (a storage object, a
graph's saved results, a reference cycle), not at the next mark's sweep;
after a training step the books hold only what lives; a parameter keeps the
storage it shares, and is found on its new memory after Module.to(); a base
only its views keep is dropped at a mark; set_ is recorded at the program's
line; copy-on-write twins share their memory and free it once; and the
observer's reader of a storage's use count is torch's. The observer is
built at first use into VRAMTRACE_CACHE_DIR (the `observer` fixture,
conftest.py). Which ops the observer hands over:
test_track_observer_ops.py."""

from __future__ import annotations

import gc
import sys

import pytest

torch = pytest.importorskip("torch")
import vramtrace  # noqa: E402
import vramtrace.torch as vtt  # noqa: E402
from vramtrace import _trackobs  # noqa: E402
from test_pyframes import python_frames, snapshot_json  # noqa: E402


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


def test_each_backward_that_reads_a_saved_result_is_a_use_of_its_storage(
        real_lib, observer, monkeypatch, tmp_path):
    """exp's result is saved for its backward, which reads it through a
    tensor of its own (SavedVariable::unpack makes one on the saved storage
    for each backward), dead by the time the observer hands the engine
    thread's ops over: the use is recorded on the storage, on the result's
    own record, at each backward (before, the result's last use read as its
    forward's, however many backward passes read it since: a graph kept
    across batches looked unused). Such an op, its output dead too, is
    recorded by _trackfast's engine_uses without its tensors given Python
    objects (uses_only_ops)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulator is not loaded): backward runs on "
                    "an engine thread only on a device")
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    with vtt.track(walk_fraction=None) as tr:
        assert tr.ops_seen_by == "observer"
        w = torch.ones(256, device="cuda", requires_grad=True)
        y = (w * 2).exp()            # ExpBackward0 saves y
        loss = y.sum()               # y recorded
        tid = tr._by_obj[id(y)].tid
        vtt.mark(before := f"forward {id(y):x}")
        for k in range(3):
            loss.backward(retain_graph=True)
            vtt.mark(f"backward {k} {id(y):x}")
        assert tr._fast.uses_only_ops >= 3, "the backward ops went through Python whole"
    assert tr.errors == 0
    snap = str(tmp_path / "saved.vtsnap")
    vramtrace.snapshot(snap)
    events = snapshot_json(snap, events=True)["events"]
    start = max(i for i, e in enumerate(events) if e["kind"] == "MARK" and e["str"] == before)
    seen = [e["str"].split()[1] if e["kind"] == "MARK" else "use" for e in events[start + 1:]
            if e["kind"] == "MARK" or (e["kind"] == "TENSOR_USE" and e["aux"] == tid)]
    assert seen == ["use", "0", "use", "1", "use", "2"], seen
    del y, loss


@pytest.mark.parametrize("depth", [4, 120])
def test_each_grad_of_a_backward_is_named_by_the_forward_line_that_made_its_memory(
        real_lib, observer, monkeypatch, depth):
    """On the device a parameter's .grad is AccumulateGrad's detach of the
    memory a backward op made; AccumulateGrad's node was made by no forward
    op, so the grad is recorded under the frames lent to the op that made
    that memory (observer.cpp, hand_over_ops' FramesOfMemory): every grad
    named by the user's forward line. A model of 120 layers makes some 360
    storages in its backward, past the list's 256, where a map holds them."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulator is not loaded): backward runs on "
                    "an engine thread only on a device")
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(depth)]).cuda()
    x = torch.randn(2, 8, device="cuda")
    with vtt.track(walk_fraction=None) as tr:
        assert tr.ops_seen_by == "observer"
        loss = model(x).square().mean()
        line = sys._getframe().f_lineno - 1
        loss.backward()
        tr._fast.flush()
        names = [tr._by_obj[id(p.grad)].name for p in model.parameters()]
    assert tr.errors == 0
    site = f"loss = model(x).square().mean() (test_track_observer_storages.py:{line}, backward: "
    assert len(names) == 2 * depth and all(n.startswith(site) for n in names), \
        [n for n in names if not n.startswith(site)][:3]


def test_a_backward_op_reading_a_tensor_the_books_never_saw_tracks_it_as_a_first_sight(
        real_lib, observer, monkeypatch):
    """A custom Function's backward reads a tensor the forward never showed
    (made before track(), kept on the Function's class): the engine op
    whose output dies (the gradient flows on into MulBackward) has a live
    input the books do not know. engine_uses (native/trackfast/dispatch.c)
    records nothing then and the observer hands the op over whole, where
    the input is tracked as a first sight, as every op's unknown input is."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulator is not loaded): backward runs on "
                    "an engine thread only on a device")
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    scale = torch.full((256,), 3.0, device="cuda")   # before track(): never seen by an op

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * Scaled.scale      # reads what no forward op showed

    Scaled.scale = scale
    with vtt.track(walk_fraction=None) as tr:
        assert tr.ops_seen_by == "observer"
        w = torch.ones(256, device="cuda", requires_grad=True)
        Scaled.apply(w * 2).sum().backward()
        vtt.mark("after backward")
        assert id(scale) in tr._by_obj, "the backward's unknown input went untracked"
    assert tr.errors == 0
    del Scaled.scale


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


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_grad_is_used_at_a_mark_only_where_its_step_did_not_use_it(real_lib, observer,
                                                                   monkeypatch, device,
                                                                   tmp_path):
    """A parameter's .grad follows its parameter (grads.c, follow): at a
    mark after a step that used the parameter, the grad is used too, with
    no stack, unless the step used it already. A training step's optimizer
    reads every grad, so its use (at the optimizer's line) stays the grad's
    last before the mark, and the mark writes none; an evaluation step uses
    the parameters only, and the mark after it uses the grad left on each."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulator is not loaded)")
    monkeypatch.delenv(_trackobs.ENV_SWITCH, raising=False)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 16, device=device)
    with vtt.track(walk_fraction=None) as tr:
        for k in range(2):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            vtt.mark(f"train {k}")
        grad = tr._by_obj[id(model.weight.grad)].tid
        with torch.no_grad():
            model(x)
        vtt.mark("eval 0")
    assert tr.errors == 0
    snap = str(tmp_path / "grads.vtsnap")
    vramtrace.snapshot(snap)
    events = snapshot_json(snap, events=True)["events"]
    begin = max(i for i, e in enumerate(events) if e["kind"] == "MARK" and e["str"] == "train 0")
    seen = [e["str"] if e["kind"] == "MARK" else ("use" if e["stack"] else "use, no stack")
            for e in events[begin + 1:]
            if e["kind"] == "MARK" or (e["kind"] == "TENSOR_USE" and e["aux"] == grad)]
    assert seen[:seen.index("eval 0") + 1] == ["use", "train 1", "use, no stack", "eval 0"], seen


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
    with vtt.track(walk_fraction=None) as tr:   # no time budget: every mark looks
        for i in range(3):
            vtt.mark(f"batch {i}")
            out = torch.randn(16, 64) * 1
            kept.append(out[:, 0])
        named["base"] = torch.randn(8, 8) * 1
        row = named["base"][0]
        ids = [tr.tensor_id(t) for t in (out, named["base"], kept[0], kept[1], row)]
        vtt.mark("end")
        owners = _owners(tr)
        views = {r.tid for s in tr._storages.values() for r in s.tids if r.base}
        first_bases = {r.base for s in tr._storages.values() for r in s.tids
                       if r.tid in (ids[2], ids[3])}
        # a dropped base lives on (its views hold it) but leaves the index of
        # live tensors with its record; a named one stays
        indexed = [id(kept[0]._base) in tr._by_obj, id(named["base"]) in tr._by_obj]
    assert indexed == [False, True]
    assert tr.errors == 0 and all(ids)
    assert ids[0] in owners and ids[1] in owners          # named: kept in the books
    assert not first_bases & owners, (first_bases, owners)   # the dropped ones: gone
    assert {ids[2], ids[3], ids[4]} <= views
    del row


def _rows_of_batches(tr, batches: int) -> tuple:
    """A loop keeping a row (a view) of each batch's output, a mark each
    batch, none of which can pay a heap pass: the rows kept, and the last
    batch's output (a caller that keeps it names it, as the loop's local
    did)."""
    kept = []
    for i in range(batches):
        tr._credit, tr._pass_cost = 0.0, 1.0    # no heap pass fits the credit
        vtt.mark(f"batch {i}")
        out = torch.randn(16, 64) * 1
        kept.append(out[:, 0])
    return kept, out


def _bases_of(tr, rows: set) -> set:
    """The bases the books record for the tensors ``rows``."""
    return {r.base for s in tr._storages.values() for r in s.tids if r.tid in rows}


def _owners(tr) -> set:
    """The tensors the books hold as their storages' owners (no view)."""
    return {r.tid for s in tr._storages.values() for r in s.tids if not r.base}


@pytest.mark.parametrize("walk_left", [False, True], ids=["a-pass-only", "a-walk-left"])
def test_bases_only_views_keep_leave_the_credit_a_walk_needs(real_lib, observer, monkeypatch,
                                                            walk_left):
    """The bases' heap pass is paid from the walks' credit only when a
    walk's least cost is left after it: paid as soon as one pass's worth
    came, it took the credit each walk waited for (actor_critic.py, a view
    of each step's critic output kept: 9 passes for bases and 1 walk in 60
    marks under run --track)."""
    from vramtrace.torch import _storages, _walks
    monkeypatch.setattr(_storages, "_BASES_PASS_S", 1e9)
    with vtt.track(walk_fraction=0.25) as tr:
        kept = _rows_of_batches(tr, 3)[0]
        waiting = _bases_of(tr, {tr.tensor_id(t) for t in kept})
        assert waiting, "no base waits for its pass"
        postponed = tr.base_drops_postponed
        tr._credit = (tr._pass_cost * (1 + _walks._LEAST_WALK_PASSES) if walk_left
                      else 1.5 * tr._pass_cost)
        tr._sweep()
        owners = _owners(tr)
        if walk_left:
            assert not waiting & owners and tr.base_drops_postponed == postponed
        else:
            assert waiting <= owners and tr.base_drops_postponed == postponed + 1
    del kept


def test_bases_only_views_keep_wait_for_a_mark_whose_credit_pays_the_heap_pass(
        real_lib, observer, monkeypatch):
    """Looking for what else refers to such bases is a pass over every
    object the collector tracks (29 ms with torch loaded), and a loop that
    keeps a row of each batch's output has a new base every step: paid at
    every mark, it more than doubled nanoGPT's small steps. It is paid from
    the walks' credit: marks that cannot pay leave the bases in the books,
    and the first that can drops them all in one pass (or the first a
    second after the last pass, which this loop never reaches)."""
    from vramtrace.torch import _storages, _walks
    monkeypatch.setattr(_storages, "_BASES_PASS_S", 1e9)
    with vtt.track(walk_fraction=0.25) as tr:
        kept, out = _rows_of_batches(tr, 4)
        rows = {tr.tensor_id(t) for t in kept[:3]}

        def bases() -> set:
            return _bases_of(tr, rows)

        def owners() -> set:
            return _owners(tr)
        waiting = bases()
        assert len(waiting) == 3 and waiting <= owners(), (waiting, owners())
        # batches 2 and 3 found bases to look for (at batch 1's mark the
        # only one was still the local `out`) and could not pay
        assert tr.base_drops_postponed == 2, tr.base_drops_postponed
        tr._credit, tr._pass_cost = 100.0, 1e-6
        vtt.mark("paid")
        assert not waiting & owners(), (waiting, owners())
        assert tr._pass_cost > 1e-6, tr._pass_cost   # measured by the pass
        # without credit, once the time since the last pass is up
        monkeypatch.setattr(_storages, "_BASES_PASS_S", 0.0)
        rows = {tr.tensor_id(kept[3])}
        waiting = bases()
        out = None
        tr._credit, tr._pass_cost = 0.0, 1.0
        vtt.mark("a second later")
        assert waiting and not waiting & owners(), (waiting, owners())
    assert tr.errors == 0


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
    with vtt.track(walk_fraction=None) as tr:   # no time budget: every mark looks
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
    sj = snapshot_json(snap, events=True)
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
    events = snapshot_json(snap, events=True)["events"]
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


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_marks_look_at_every_tensors_storage_reads_what_torch_says(real_lib, observer,
                                                                    monkeypatch, device):
    """A mark looks at the storage of every live tracked tensor (one moved
    by ``.data =`` shows no op): read in C++ from the tensor's TensorImpl
    (trackobs_storage_key) once a probe shows the Python tensor is laid out
    as torch's, instead of a call of torch._C._storage_id each (0.34 ms a
    mark at 3,000 kept tensors). The same tensors come out: those moved,
    not their views, nor those that stayed; and the reading is the one
    _storage_id gives, for a dense tensor, a view, a Parameter and a
    subclass alike."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (the simulated one runs under simrun)")
    monkeypatch.setenv(_trackobs.ENV_SWITCH, "1")

    class Sub(torch.Tensor):
        pass

    with vtt.track(walk_fraction=None) as tr:
        fast = tr._fast
        assert fast.read_storages_with(tr._observer.storage_key_address,
                                       torch.empty(0, device="cpu")), \
            "the probe's TensorImpl was not read as torch's _cdata"
        a = torch.ones(8, device=device) * 2
        v = a[2:]
        p = torch.nn.Parameter(torch.ones(4, device=device) * 3)
        s = (torch.ones(4, device=device) * 4).as_subclass(Sub)
        stays = torch.ones(4, device=device) * 5
        for t in (a, v, p, s, stays):
            (t * 1).sum()                         # each used: tracked
        recs = {n: tr._by_obj[id(t)] for n, t in
                dict(a=a, v=v, p=p, s=s, stays=stays).items()}
        for n, t in dict(a=a, v=v, p=p, s=s, stays=stays).items():
            assert recs[n].skey == torch._C._storage_id(t), n
        assert fast.tensors_to_check() == []
        a.data = torch.ones(3, device=device)     # no op shows either move
        s.data = torch.ones(3, device=device)
        assert {id(r) for r in fast.tensors_to_check()} == {id(recs["a"]), id(recs["s"])}
        fast.read_storages_with(0, torch.empty(0, device="cpu"))   # torch._C._storage_id
        assert {id(r) for r in fast.tensors_to_check()} == {id(recs["a"]), id(recs["s"])}
        del v
    assert tr.errors == 0
