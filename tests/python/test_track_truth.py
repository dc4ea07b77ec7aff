"""track() on leak programs written the way users write them (leaks/),
end to end with the real library and `vramtrace check --json`: the observer
does not change what it observes, storage lives come from the storages, and
each leak is flagged with its holder while its fixed twin comes out clean."""

from __future__ import annotations

import json
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
# untyped_storage(), storage weak handles, Megatron's engine call: torch 2.x
pytestmark = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                                reason=f"needs torch >= 2, this is {torch.__version__}")

import vramtrace  # noqa: E402
from conftest import DEVICES, run_traced, vt_check, vt_cli  # noqa: E402
import vramtrace.torch as vtt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LEAKS = os.path.join(HERE, "leaks")


def _cli() -> str:
    return vt_cli()


def _trace(program: str, twin: str, out: str, device: str = "cpu") -> dict:
    return run_traced(os.path.join(LEAKS, "run_leak.py"), [program, twin, out], out,
                      device=device,
                      extra_path=(LEAKS,), timeout=300)


# The leak twins' runs, kept for the test that runs each a second time.
_LEAK_RUNS: dict = {}


def _check(snap: str) -> tuple:
    return vt_check(snap, timeout=120)


def _traced_check(program: str, twin: str, out: str, device: str = "cpu") -> tuple:
    """The steps of the leak and fixed tests: the CLI found, the program's
    twin traced to out on device, checked: (info, rc, report)."""
    _cli()
    info = _trace(program, twin, out, device)
    rc, rep = _check(info["snap"])
    return info, rc, rep


def _text(rep: dict) -> str:
    return "\n".join(f"{f['addr']} {f['bytes']} {[p['text'] for p in f['paths']]}"
                     for f in rep["findings"])


PROGRAMS = ["tensor_key_cache", "pipeline_dealloc", "padded_gather"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("program", PROGRAMS)
def test_leak_is_flagged_exactly_with_its_holder(program, device, tmp_path):
    info, rc, rep = _traced_check(program, "leak", str(tmp_path / "leak.vtsnap"), device)
    _LEAK_RUNS[program, device] = (rc, rep)
    text = _text(rep)
    expect = {int(a, 16): n for a, n in info["expect"].items()}
    assert expect, "the program retained nothing"
    assert rc == 1, text
    found = {int(f["addr"], 16): f for f in rep["findings"]}
    missing = sorted(hex(a) for a in expect if a not in found)
    assert not missing, f"not flagged: {missing}\n{text}"
    for addr, nbytes in expect.items():
        assert found[addr]["bytes"] == nbytes, (hex(addr), found[addr]["bytes"], nbytes)
        # on the device a storage is the allocator's own allocation
        assert found[addr]["external"] == (device == "cpu"), found[addr]
        paths = [p["text"] for p in found[addr]["paths"]]
        assert any(info["holder"] in p for p in paths), (hex(addr), paths)
    # one bug is one or two causes (the leaked storages and what they pin),
    # named by the line that made the tensor, not one finding per storage
    groups = rep["groups"]
    assert sum(g["count"] for g in groups) == len(rep["findings"]), groups
    assert 1 <= len(groups) <= 2 < len(rep["findings"]), groups
    assert all(f"{program}.py:" in g["owner"] for g in groups), groups
    extra = sorted(f"{hex(a)} {found[a]['bytes']}" for a in found if a not in expect)
    assert not extra, f"false positives: {extra}\n{text}"
    assert info["errors"] == 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("program", PROGRAMS)
def test_fixed_twin_is_clean(program, device, tmp_path):
    info, rc, rep = _traced_check(program, "fixed", str(tmp_path / "fixed.vtsnap"), device)
    assert rep["findings"] == [], _text(rep)
    assert rc == 0
    assert rep["tensors"] > 0 and rep["marks"] >= 6
    assert info["errors"] == 0


def _finding_shapes(rep: dict) -> list:
    """Findings without addresses: what must not change between runs."""
    return sorted((f["bytes"], f["rule"], tuple(sorted(p["text"].split(" → storage")[0]
                                                         for p in f["paths"])))
                  for f in rep["findings"])


@pytest.mark.parametrize("program", ["pipeline_dealloc", "padded_gather"])
def test_results_do_not_change_between_runs(program, tmp_path):
    _cli()
    reps = [_LEAK_RUNS[program, "cpu"]] if (program, "cpu") in _LEAK_RUNS else []
    while len(reps) < 2:   # the leak test's run, and one more
        info = _trace(program, "leak", str(tmp_path / f"run{len(reps)}.vtsnap"))
        reps.append(_check(info["snap"]))
    assert reps[0][0] == reps[1][0]
    assert _finding_shapes(reps[0][1]) == _finding_shapes(reps[1][1])


# -- the observer changes nothing (recording fake) ---------------------------

class _Cache:
    def __init__(self) -> None:
        self.by_batch: dict = {}


def test_marks_record_no_use_and_no_tensor_of_their_own(fake):
    """A mark's holder walk passes a tensor-keyed dict and autograd nodes
    with saved tensors: none of it is recorded as the program's activity."""
    cache = _Cache()
    w = torch.randn(8, 8, requires_grad=True)
    keep = []
    with vtt.track(walk_fraction=None) as tr:
        for i in range(4):
            vtt.mark(f"iteration {i}")
            x = torch.randn(8, 8)
            y = torch.tanh(x @ w)          # TanhBackward0 saves y
            cache.by_batch[x] = y
            keep.append(y.sum())           # keeps the graph (saved tensors) alive
        vtt.mark("iteration 4")     # records the last op's output, held back for a name
        before = (len(fake.of("use")), len(fake.of("tensor_new")), tr.ops)
        walks = tr.walks
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            vtt.mark("iteration 5")
            vtt.mark("iteration 6")
        # nor does it make PyTorch warn (reading .grad of a non-leaf does)
        assert not said, [str(w.message)[:80] for w in said]
        after = (len(fake.of("use")), len(fake.of("tensor_new")), tr.ops)
    assert tr.walks > walks
    assert before == after
    # and the walk did find the cache, labelled without formatting the key
    paths = fake.paths_to(tr.tensor_id(y))
    assert any("_Cache .by_batch -> dict [<Tensor>]" in p for p in paths), paths
    assert tr.walks >= 1


def test_data_assignment_frees_the_storage_and_reuse_is_a_new_storage(fake):
    with vtt.track(walk_fraction=None):
        out = torch.ones(1000) * 2
        _, ptr = out.untyped_storage().data_ptr(), None
        ptr = out.untyped_storage().data_ptr()
        out.data = torch.empty(1)         # Megatron's deallocate_output_tensor
        again = torch.ones(1000) * 3      # the allocator may hand out ptr again
        vtt.mark("after")
    frees = [e for e in fake.events if e == ("storage_free", ptr)]
    assert len(frees) >= 1, "the deallocated storage was never released"
    # no storage is declared twice while it lives
    live = set()
    for e in fake.events:
        if e[0] == "storage":
            assert e[1] not in live
            live.add(e[1])
        elif e[0] == "storage_free":
            live.discard(e[1])
    del out, again


def test_storage_resize_to_zero_releases_it_while_the_tensor_lives(fake):
    with vtt.track(walk_fraction=None):
        buf = torch.zeros(4096)
        view = buf[:100].view(10, 10)
        ptr = buf.untyped_storage().data_ptr()
        del buf
        view.untyped_storage().resize_(0)   # DeepSpeed's free_param
        vtt.mark("after")
    assert ("storage_free", ptr) in fake.events
    del view


def test_set_moves_a_live_tensor_to_another_storage_and_releases_the_old_one(fake):
    with vtt.track(walk_fraction=None) as tr:
        t = torch.zeros(1000) * 1
        old = t.untyped_storage().data_ptr()
        src = torch.ones(250) * 2
        new = src.untyped_storage().data_ptr()
        before = len(fake.events)
        t.set_(src.untyped_storage())       # t alone held the old storage
        vtt.mark("after")
        assert tr._by_obj[id(t)].skey == src.untyped_storage()._cdata
    after = fake.events[before:]
    assert ("storage_free", old) in after
    # t is recorded anew on src's memory, under the name it had
    moved = [e for e in after if e[0] == "tensor_new" and e[2] == new and e[5].startswith("t = ")]
    assert len(moved) == 1 and moved[0][3] == 1000, after
    del t, src


def test_one_buffer_wrapped_twice_is_one_memory_open_while_either_lives(fake):
    # Two storages on one memory (as a copy-on-write clone and its source
    # are): not memory freed and reused, so neither ends the other.
    buf = bytearray(4096)
    with vtt.track(walk_fraction=None):
        a = torch.frombuffer(buf, dtype=torch.float32)
        b = torch.frombuffer(buf, dtype=torch.float32)
        c = a + b
        ptr = a.untyped_storage().data_ptr()
        assert b.untyped_storage().data_ptr() == ptr
        assert a.untyped_storage()._cdata != b.untyped_storage()._cdata
        del a
        vtt.mark("a gone")
        assert ("storage_free", ptr) not in fake.events
        d = b * 2
        del b
        vtt.mark("b gone")
    assert [e for e in fake.events if e[:2] == ("storage", ptr)] == [("storage", ptr, 4096, -1)]
    assert fake.events.count(("storage_free", ptr)) == 1
    del c, d


def test_walk_without_budget_is_postponed_and_a_cut_off_is_reported(fake, tmp_path):
    with vtt.track(walk_fraction=0.0, snapshot_walk_s=1e-9) as tr:
        vtt.mark("a")
        held = [torch.ones(4) * 2 for _ in range(3)]
        vtt.mark("b")
        vtt.mark("c")
        assert tr.walks == 0 and tr.walks_postponed >= 1
        with pytest.warns(RuntimeWarning, match="time budget"):
            vramtrace.snapshot(str(tmp_path / "x.vtsnap"))
    assert tr.walk_cutoffs == 1
    del held


def test_a_tracker_told_where_to_say_things_issues_no_warning(fake, tmp_path):
    """`vramtrace run --track` gives the tracker its own note(): the
    program's warnings filters (-W error, pytest's) never see vramtrace's."""
    said = []
    with vtt.track(walk_fraction=0.0, snapshot_walk_s=1e-9) as tr:
        tr.say = said.append
        vtt.mark("a")
        held = [torch.ones(4) * 2 for _ in range(3)]
        vtt.mark("b")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            vramtrace.snapshot(str(tmp_path / "x.vtsnap"))
    assert tr.walk_cutoffs == 1
    assert len(said) == 1 and "time budget" in said[0], said
    del held


def test_a_marks_walk_cut_short_is_not_warned_about(fake, tmp_path):
    """A mark's walk stopped by its budget is routine (later marks look
    further): counted, never said; only a snapshot's is (the test above)."""
    said = []
    with vtt.track(walk_fraction=1e-12) as tr:
        tr.say = said.append
        tr._pass_cost = 0.0            # the walk runs whatever its budget
        vtt.mark("a")
        held = [torch.ones(4) * 2 for _ in range(3)]
        vtt.mark("b")
        tr._credit = 1e-9              # a budget that runs out before the first level
        vtt.mark("c")
        assert tr.walk_cutoffs == 1 and said == [], (tr.walk_cutoffs, said)
        vramtrace.snapshot(str(tmp_path / "x.vtsnap"))
    assert said == [], said
    del held


class _Keeper:
    def __init__(self) -> None:
        self.late = None


def test_stale_tensors_under_unchanged_references_are_not_walked_again(fake):
    """Batches reused every 4 steps go stale again and again under the same
    list: after one complete walk found their holder, marks skip the heap
    pass; a reference taken later changes the count and is walked."""
    batches = [torch.ones(4) * k for k in range(4)]
    keeper = _Keeper()
    with vtt.track(walk_fraction=None) as tr:
        for i in range(20):
            vtt.mark(f"iteration {i}")
            y = (batches[i % 4] * 2).sum()
            if i == 2:
                old = torch.ones(4) * 7      # used once, stale from then on
                oid = tr.tensor_id(old)
        assert tr.walks_skipped > 0
        assert not [p for p in fake.paths_to(oid) if "_Keeper" in p]
        keeper.late = old                    # a new holder: its count changed
        walks = tr.walks
        vtt.mark("iteration 20")
        assert tr.walks == walks + 1
    paths = fake.paths_to(oid)
    assert any("_Keeper .late" in p for p in paths), paths
    del y, old


def _hook_keeping(inter: dict):
    def hook(grad_output):   # its closure keeps the dict alive
        return inter.get("unused")
    return hook


def test_a_cycle_through_an_autograd_node_pre_hook_is_shown_as_a_cycle(fake):
    """The pipelining hook cycle: an intermediate's grad_fn has a pre-hook
    whose closure keeps a dict holding the intermediate. The node holds the
    hook from C++ (gc sees no edge, so gc never frees it): the walk must
    follow node -> pre-hooks without registering anything on the node."""
    w = torch.randn(8, 8, requires_grad=True)
    with vtt.track(walk_fraction=None) as tr:
        vtt.mark("iteration 0")
        inter = {}
        y = torch.relu(torch.randn(8, 8) @ w)
        inter["y"] = y

        handle = y.grad_fn.register_prehook(_hook_keeping(inter))
        tid = tr.tensor_id(y)
        del y, inter
        for i in range(1, 4):
            vtt.mark(f"iteration {i}")
            torch.ones(2) * i
    paths = fake.paths_to(tid)
    through = [p for p in paths if "ReluBackward0" in p and "pre_hooks" in p]
    assert through, paths
    assert any("closure cell 'inter' of hook" in p for p in through), through
    # the cycle closes: the tensor holds the node (its grad_fn)
    nodes = [d for (src, d), label in fake.live_refs().items()
             if src == tid and label == "grad_fn"]
    assert [fake.names[d] for d in nodes] == ["ReluBackward0"], nodes
    handle.remove()
