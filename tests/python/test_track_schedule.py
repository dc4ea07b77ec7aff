"""When track() walks the heap for holders, against a recording fake: a
storage that rests as long as it did before (a batch reused every k steps)
is not walked, one unused longer than ever is; new stale tensors are walked
alone (a partial walk) without retracting what earlier walks found; and the
stack cache keys frames by code identity without ever confusing two codes;
a program without marks walks at ticks (dispatch.c), each within its share
of time, due a tick after the last one ended, until the program marks."""

from __future__ import annotations

import gc
import time
import weakref

import pytest

torch = pytest.importorskip("torch")

import vramtrace.torch as vtt  # noqa: E402
from vramtrace._stacks import StackInterner  # noqa: E402


def _live_holders(fake, tid):
    return [fake.names.get(src) for (src, dst) in fake.live_refs() if dst == tid]


def test_batches_reused_every_k_steps_rest_instead_of_being_walked(fake):
    batches = [torch.ones(4) * k for k in range(4)]
    with vtt.track(walk_fraction=None) as tr:
        for i in range(24):
            vtt.mark(f"iteration {i}")
            if i == 9:   # every batch went stale once and was used again
                walks, resting = tr.walks, tr.resting_skipped
            y = (batches[i % 4] * 2).sum()
    assert walks >= 1, "the first time a batch went stale it was walked"
    assert tr.walks == walks, "a resting batch was walked again"
    assert tr.resting_skipped > resting
    del y


def test_a_resting_storage_unused_longer_than_ever_is_walked_again(fake):
    batches = [torch.ones(4) * k for k in range(2)]
    with vtt.track(walk_fraction=None) as tr:
        for i in range(10):                  # each batch rests one step
            vtt.mark(f"iteration {i}")
            y = (batches[i % 2] * 2).sum()
        tid = tr.tensor_id(batches[0])
        assert tr.resting_skipped > 0
        for i in range(10, 16):              # batch 0 is not used any more
            vtt.mark(f"iteration {i}")
            y = (batches[1] * 2).sum()
        vtt.mark("iteration 16")
    assert "list" in _live_holders(fake, tid), fake.paths_to(tid)
    del y


def test_new_stale_tensors_are_walked_alone_and_earlier_holders_stay(fake):
    kept = []
    w = torch.ones(4)
    with vtt.track(walk_fraction=None) as tr:
        for i in range(12):
            vtt.mark(f"iteration {i}")
            kept.append(w * i)               # the leak: one tensor per step
        vtt.mark("iteration 12")
        ids = [tr.tensor_id(t) for t in kept[:-1]]
        # every leaked tensor stale since a mark is held, as found by the
        # walk that first saw it: later walks did not retract it
        missing = [t for t in ids if "list" not in _live_holders(fake, t)]
        assert not missing, [fake.paths_to(t) for t in missing]
        assert tr.partial_walks >= 5
    del kept


def test_the_programs_time_before_its_first_mark_pays_for_walks(fake):
    """The walks may spend a quarter of the program's own time, counted from
    track()'s start: a short job (its setup, then a few quick steps: a
    torchrun job of eight steps) gets its holders named at its marks, not
    only at its end, when the function that held them has returned."""
    def job(kept):
        deadline = time.process_time() + 0.4
        while time.process_time() < deadline:   # setup: data, model, workers
            pass
        w = torch.ones(4)
        for i in range(6):
            vtt.mark(f"iteration {i}")
            kept.append(w * i)                   # quick steps, a tensor kept each
        return tr.tensor_id(kept[0])

    kept = []
    with vtt.track() as tr:
        tid = job(kept)
        assert tr.walks >= 1, (tr.walks, tr.walks_postponed)
    assert "list" in _live_holders(fake, tid), fake.paths_to(tid)
    del kept


def test_a_full_walk_still_retracts_a_released_holder(fake):
    class Box:
        pass
    box = Box()
    with vtt.track(walk_fraction=None) as tr:
        vtt.mark("step 0")
        box.kept = [torch.ones(4) * 2]
        keep = box.kept[0]
        vtt.mark("step 1")
        vtt.mark("step 2")
        tid = tr.tensor_id(keep)
        assert "list" in _live_holders(fake, tid)
        box.kept = []                        # released: the count changes
        vtt.mark("step 3")
    assert "list" not in _live_holders(fake, tid)
    del keep


def test_a_full_walk_cut_short_keeps_what_it_did_not_reach(fake):
    """A list a frame keeps as a local and a closure cell of a function the
    same frame keeps (tests/torch/actor_critic.py: main's value_log and its
    act()). A complete walk cut off after the list's level never reached
    the function's holders: it retracts none of them (it retracts what it
    no longer found only of the nodes whose level it finished: the kept
    tensors). Before: it retracted the frame's local holding act(), act()
    became a root as near as the frame, and `check` named the chain
    "function act.closure cell 'log' of act" one run in a few."""
    from vramtrace.torch import _walks
    log = []

    def act(i):
        log.append(torch.ones(4) * i)

    with vtt.track(walk_fraction=None) as tr:
        vtt.mark("step 0")
        for i in range(3):
            act(i)
        vtt.mark("step 1")
        vtt.mark("step 2")
        tid = tr.tensor_id(log[0])
        fn = [k for k, v in fake.names.items() if v == "function act"]
        assert len(fn) == 1, fake.names
        held_act = [lb for (src, dst), lb in fake.live_refs().items() if dst == fn[0]]
        assert any(lb.startswith("local 'act'") for lb in held_act), fake.paths_to(tid)
        walk = tr._walk
        cuts = []

        def cut_where_act_is_reached_and_not_walked(starts, seen, deadline,
                                                    clock=_walks._cpu_clock):
            # a walk (no side effect: the caller asserts what it returns)
            # stopped after k levels, for the first k whose walk found the
            # function but not its holders
            for k in range(1, 20):
                ticks = iter(range(10 ** 6))
                res = walk(dict(starts), seen, k - 0.5, lambda: next(ticks))
                act_keys = {key for key, name in res.names.items() if name == "function act"}
                if res.cut_off and act_keys and not any(e.dst in act_keys for e in res.edges):
                    cuts.append(k)
                    return res
            raise AssertionError("no walk cut off between act() and its holders")
        tr._walk = cut_where_act_is_reached_and_not_walked
        tr._walked.clear()        # fresh starts: a complete walk is due
        vtt.mark("step 3")
        assert cuts, "the cut walk did not run"
        assert tr.walk_cutoffs == 1, tr.walk_cutoffs
        held_act = [lb for (src, dst), lb in fake.live_refs().items() if dst == fn[0]]
        assert any(lb.startswith("local 'act'") for lb in held_act), fake.paths_to(tid)
        assert "list" in _live_holders(fake, tid), fake.paths_to(tid)
    del log


class _Frames:
    def __init__(self):
        self.stacks = []

    def intern_stack(self, frames):
        self.stacks.append(list(frames))
        return len(self.stacks)


def _function_at(line, filename):
    src = "\n" * (line - 1) + "def f(capture):\n    return capture()\n"
    ns = {}
    exec(compile(src, filename, "exec"), ns)
    return ns["f"]


def test_stack_cache_keeps_the_codes_of_its_keys_alive():
    """The cache keys frames by id(code): the code objects stay alive with
    the key, so a later code object can never take a cached id."""
    lib = _Frames()
    st = StackInterner(lib)
    f1 = _function_at(10, "/nowhere/first.py")
    code_ref = weakref.ref(f1.__code__)
    sid1 = f1(lambda: st.capture(2))
    del f1
    gc.collect()
    assert code_ref() is not None
    sids = set()
    for k in range(20):                      # new code objects, maybe at freed ids
        f = _function_at(20 + k, f"/nowhere/other{k}.py")
        sids.add(f(lambda: st.capture(2)))
        del f
    assert sid1 not in sids
    assert lib.stacks[sid1 - 1][0][1:] == ("/nowhere/first.py", 11)
    for sid in sids:
        assert lib.stacks[sid - 1][0][1].startswith("/nowhere/other")


def test_a_value_rebuilt_larger_from_itself_is_walked_though_used_every_step(fake):
    """`kept = torch.cat([kept, x])` each step: the line's value is used
    every step, never stale, so no mark walked it and a growth finding on it
    named no holder; made by an op that read the line's own smaller value
    (StorageRec.regrown), it is walked all the same. A value rebuilt from
    itself at its size (an average) and one made afresh larger each step
    (a length curriculum's batch) are neither marked nor walked; nor is a
    gradient, made within its backward from a smaller one made at the same
    stack (on the CPU every op of a backward has the stack of the line that
    called backward())."""
    w = torch.ones(4)
    lin, x = torch.nn.Linear(16, 64), torch.ones(2, 16)   # its weight's grad > its output's
    with vtt.track(walk_fraction=None) as tr:
        kept = torch.zeros(0)
        ema = torch.zeros(4)
        for i in range(8):
            vtt.mark(f"iteration {i}")
            kept = torch.cat([kept, w * i])
            ema = ema * 0.5 + w
            fresh = torch.ones(i + 1)
            lin.zero_grad(set_to_none=True)
            lin(x).square().mean().backward()

        def regrown(t):
            return tr._storages[tr._by_obj[id(t)].skey].regrown
        assert (regrown(kept), regrown(ema), regrown(fresh)) == (True, False, False)
        assert not regrown(lin.weight.grad) and not regrown(lin.bias.grad)
        vtt.mark("iteration 8")
        tid = tr.tensor_id(kept)
        assert "frame" in _live_holders(fake, tid), fake.paths_to(tid)
        assert any("frame local 'kept'" in p for p in fake.paths_to(tid)), fake.paths_to(tid)
        for t in (ema, fresh):
            assert _live_holders(fake, tr.tensor_id(t)) == [], fake.paths_to(tr.tensor_id(t))


def test_what_a_loop_carries_more_of_each_step_is_walked_though_used_every_step(fake,
                                                                             monkeypatch):
    """Hooks that pile up on a module, each reading its own closure's
    tensor: every one is used every step, never stale, and where the model
    is a local of a function that returned before the snapshot, neither a
    mark's walk nor the snapshot's named what keeps them (a growth finding
    with no holder). What the loop carries from step to step and still uses
    (stale_storages' `carried`) grows mark after mark: after a few, a mark
    walks the lines that made many of it. A loop that carries the same (its
    weights, their gradients, a reused batch) walks none of them."""
    from vramtrace.torch._tracker import Tracker
    grown = []
    real = Tracker._growing_starts

    def counted(self, threshold, starts, counts):
        grown.append(threshold)
        return real(self, threshold, starts, counts)
    monkeypatch.setattr(Tracker, "_growing_starts", counted)
    lin, batch = torch.nn.Linear(8, 8), torch.ones(2, 8)
    with vtt.track(walk_fraction=None) as tr:
        for i in range(8):
            vtt.mark(f"clean {i}")
            lin.zero_grad(set_to_none=False)
            lin(batch).sum().backward()
        assert grown == [], grown
        first = None
        for i in range(6):
            vtt.mark(f"iteration {i}")
            x = torch.ones(8) * i
            first = x if first is None else first
            lin.register_forward_hook(lambda mod, inp, out, x=x: out.add(x))
            lin.zero_grad(set_to_none=False)
            lin(batch).sum().backward()
        vtt.mark("iteration 6")
        assert len(grown) == 1, grown
        paths = fake.paths_to(tr.tensor_id(first))
        assert any("_forward_hooks" in p and "__defaults__" in p for p in paths), paths


def test_a_mark_whose_credit_fits_no_walk_does_not_read_the_stale_set(fake, monkeypatch):
    """The stale set costs a pass over every storage, and grows with what
    the program keeps: a mark whose credit cannot pay even a walk of one
    start is postponed before reading it (a loop that kept a tensor a step
    paid 1.7 ms a mark at 1,000 kept for walks it could never afford); with
    the credit, the mark reads it and walks."""
    from vramtrace.torch._tracker import Tracker
    read = []
    real = Tracker._stale_starts

    def counted(self, threshold, final):
        read.append(final)
        return real(self, threshold, final)
    monkeypatch.setattr(Tracker, "_stale_starts", counted)
    kept = []
    with vtt.track(walk_fraction=0.25) as tr:
        for i in range(4):
            vtt.mark(f"iteration {i}")
            kept.append(torch.ones(4) * i)
            tr._credit, tr._pass_cost = 0.0, 1.0    # a walk costs far more than is saved
            tr._earned = 0.0    # (and the running frames' walks have no share of it)
        assert read == [] and tr.walks_postponed >= 3 and tr.walks == 0, \
            (read, tr.walks_postponed)
        tr._credit, tr._pass_cost = 100.0, 1e-6
        vtt.mark("iteration 4")
        assert read == [False] and tr.walks == 1, (read, tr.walks)
    tid = tr.tensor_id(kept[0])
    assert "list" in _live_holders(fake, tid), fake.paths_to(tid)


def test_a_mark_whose_credit_pays_no_walk_names_the_running_frames_holders(fake):
    """A short program's credit pays a walk or two: a mark that cannot
    afford one still names what the running frames hold (here a list, a
    local, that a step appends to), with no heap pass and counted as no
    walk, from a quarter of the credit the program earned at most; without
    that share, nothing is read."""
    kept = []
    with vtt.track(walk_fraction=0.25) as tr:
        for i in range(3):
            vtt.mark(f"iteration {i}")
            kept.append(torch.ones(4) * i)
            tr._credit, tr._pass_cost = 0.0, 1.0     # no walk fits
            tr._earned, tr._frames_spent = 0.0, 0.0  # no share for the frames either
        assert tr.walks == 0 and tr.frame_walks == 0, (tr.walks, tr.frame_walks)
        tr._earned = 1.0
        vtt.mark("iteration 3")
        assert tr.walks == 0 and tr.frame_walks == 1, (tr.walks, tr.frame_walks)
        assert 0 < tr._frames_spent <= 0.25 * tr._earned
        tid = tr.tensor_id(kept[0])
        assert any("local 'kept' in " in str(p) for p in fake.paths_to(tid)), \
            fake.paths_to(tid)
        vtt.mark("iteration 4")   # (the last one appended went stale)
        frame_walks = tr.frame_walks
        vtt.mark("iteration 5")   # nothing stale that no walk saw: nothing walked
        assert tr.frame_walks == frame_walks, tr.frame_walks
        tr._frames_spent = 0.25 * tr._earned      # its share spent
        kept.append(torch.ones(4))
        for i in range(6, 9):
            vtt.mark(f"iteration {i}")
        assert tr.frame_walks == frame_walks, tr.frame_walks
    del kept


def test_a_walk_runs_once_in_half_a_ring_whatever_its_credit(fake):
    """A loop whose marks' other work outgrows the walk budget never walked
    before the exit snapshot (a signal's snapshot had tensors and no
    holders): once the program has recorded half a ring with no walk, a
    mark's walk runs whatever its credit, and not again before the next
    half ring."""
    kept = []
    with vtt.track(walk_fraction=0.25) as tr:
        fake.window = (100, 1000)
        for i in range(4):
            vtt.mark(f"iteration {i}")
            kept.append(torch.ones(4) * i)
            tr._credit, tr._pass_cost = 0.0, 1.0    # no walk fits the credit
        assert tr.walks == 0 and tr.walks_postponed >= 3, tr.walks_postponed
        fake.window = (600, 1000)                   # half a ring, no walk
        vtt.mark("iteration 4")
        assert tr.walks == 1 and tr.forced_walks == 1, (tr.walks, tr.forced_walks)
        tid = tr.tensor_id(kept[0])
        assert "list" in _live_holders(fake, tid), fake.paths_to(tid)
        kept.append(torch.ones(4) * 5)
        tr._credit = 0.0
        fake.window = (900, 1000)                   # less than half a ring since
        vtt.mark("iteration 5")
        vtt.mark("iteration 6")
        assert tr.walks == 1, tr.walks
        fake.window = (1200, 1000)
        vtt.mark("iteration 7")
        assert tr.walks == 2 and tr.forced_walks == 2, (tr.walks, tr.forced_walks)


def test_a_ticks_walk_takes_at_most_its_share_whatever_its_credit(fake):
    """A program without marks is judged by time (a grace of 1 s at least):
    the holder walk at a tick is given at most _TICK_WALK_S, however much
    credit the walks saved (model construction before the loop leaves up to
    snapshot_walk_s); a mark's walk may spend it all. Before: a tick spent 5 s
    of credit at once and paused hf_decode.py 1.2 s under load, and the
    program's replaced temporaries were flagged as lingering."""
    from vramtrace.torch import _marks, _walks
    budgets = []
    with vtt.track() as tr:
        walk = tr._walk

        def noted(starts, seen, deadline, clock=_walks._cpu_clock):
            budgets.append(None if deadline is None else deadline - clock())
            return walk(starts, seen, deadline, clock)
        tr._walk = noted
        kept = [torch.ones(64) * 2 for _ in range(3)]
        for kind in ("tick", "mark"):
            tr.epoch += 2                # what the kept tensors were used in is long past
            tr._credit = 100.0           # far more saved than any tick may take
            tr._walked.clear()           # fresh starts: a walk is due
            tr._on_mark(kind, "")
        del kept
    assert len(budgets) == 2, budgets
    assert budgets[0] <= _marks._TICK_WALK_S, budgets   # the tick's, capped
    assert budgets[1] > 1.0, budgets    # the mark's: its credit (at most snapshot_walk_s)


def test_a_ticks_walk_ends_in_time_on_a_loaded_machine(fake):
    """A tick's bound counts from the tick's start, its sweep included, on
    the faster of the CPU and the wall clock: a process a loaded machine
    leaves waiting spends wall time, not CPU (here the sweep sleeps 0.15 s:
    no CPU). Before: 0.2 s of CPU for the walk alone, and its sweep on top,
    paused hf_decode.py 0.7 s under load."""
    from vramtrace.torch import _marks, _walks
    budgets = []
    with vtt.track() as tr:
        walk, sweep = tr._walk, tr._sweep

        def noted(starts, seen, deadline, clock=_walks._cpu_clock):
            budgets.append(None if deadline is None else deadline - clock())
            return walk(starts, seen, deadline, clock)

        def slow_sweep(forced=False):
            time.sleep(0.15)
            sweep(forced)
        tr._walk, tr._sweep = noted, slow_sweep
        kept = [torch.ones(64) * 2 for _ in range(3)]
        tr.epoch += 2
        tr._credit = 100.0
        tr._walked.clear()
        tr._on_mark("tick", "")
        del kept
    # walked, and given what the sweep left of the tick: under 0.05 s
    assert budgets and all(b is not None and b <= _marks._TICK_WALK_S - 0.15 for b in budgets), budgets
    # and the tick's pause of the program, sweep and all, recorded (PAUSE)
    assert fake.pauses and fake.pauses[-1] >= 150_000_000, fake.pauses
    clock = _walks.tick_clock()
    time.sleep(0.05)
    assert clock() >= 0.05


def test_the_next_tick_is_due_a_tick_after_the_last_one_ended(fake):
    """dispatch.c: tick_s counts from the end of a tick's work, not its
    start: a tick that took tick_s (a loaded machine) was followed by
    another at the next op, and the two paused the program for longer than
    `check` waits before calling a temporary held."""
    spans = []
    with vtt.track() as tr:
        tr._fast.tick_s = 0.05

        def slow_tick():
            began = time.perf_counter()
            time.sleep(0.06)
            spans.append((began, time.perf_counter()))
            return True
        tr._tick = slow_tick
        x = torch.ones(4)
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            x = x + 1
    assert len(spans) >= 3, spans
    for (_, ended), (began, _) in zip(spans, spans[1:]):
        assert began - ended >= 0.05 - 1e-3, spans


def test_a_program_without_marks_ticks_until_it_marks(fake):
    """The tick (dispatch.c): a mark's work every tick_s of a program's ops
    while it has made no mark, none once it marks."""
    with vtt.track() as tr:
        tr._fast.tick_s = 0.01
        x = torch.ones(4)
        end = time.perf_counter() + 0.1
        while time.perf_counter() < end:
            x = x + 1
        assert tr.epoch >= 2, tr.epoch   # ticks: epochs without a MARK
        assert not [e for e in fake.events if e[0] == "mark"], fake.events   # none recorded
        vtt.mark("first")
        epoch = tr.epoch
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            x = x + 1
        assert tr.epoch == epoch


class _Trainer:
    def __init__(self):
        self.log = {"kept_states": []}

    def save(self, i):
        self.log["kept_states"].append({"w": torch.ones(4) * i})


def _train_under_a_tight_credit(tr, trainer, marks, walks):
    """``marks`` marks of a training loop whose walks cost PASS a level on a
    clock of their own and whose credit grows by 1.2 levels a mark (a heap
    pass dearer than a step's share: minGPT-ddp's 22 ms passes, 60-90 ms of
    credit at a walk); each walk's (levels, cut off) into ``walks``."""
    from vramtrace.torch import _walks
    PASS = 0.1
    walk = tr._walk

    def walk_on_the_credits_clock(starts, seen, deadline, clock=_walks._cpu_clock):
        # as many levels as the allowance pays for (the walker reads its
        # clock before each level), each paid from the credit
        levels = (deadline - clock()) / PASS if deadline is not None else 100
        ticks = iter(range(10 ** 6))
        res = walk(starts, seen, levels - 0.5, lambda: next(ticks))
        walks.append((res.levels, res.cut_off))
        tr._credit -= res.levels * PASS
        return res
    tr._walk = walk_on_the_credits_clock
    for i in range(marks):
        tr._pass_cost = PASS
        tr._credit += 1.2 * PASS
        vtt.mark(f"step {i}")
        trainer.save(i)


def test_a_walk_its_credit_cut_short_waits_to_walk_deeper(fake):
    """A chain deeper than the credit a step earns (a frame's `self`, the
    Trainer, its list of kept states, each state's dict) was walked as soon
    as two levels fit, cut there, and again at the next such mark, never
    whole (here the states' list is in a dict of the Trainer's, a level
    more): minGPT-ddp's kept weights named `Trainer.kept_states` (at exit,
    after train() had returned) instead of the local `self` of train().
    After a cut walk the next waits for the levels it made and two more."""
    walks = []

    def train(trainer):
        _train_under_a_tight_credit(tr, trainer, 24, walks)

    with vtt.track(walk_fraction=0.25) as tr:
        trainer = _Trainer()
        train(trainer)
        tid = tr.tensor_id(trainer.log["kept_states"][0]["w"])
        chains = fake.paths_to(tid)
    assert walks and walks[0][1], walks           # the first walk was cut short
    assert any(not cut for _, cut in walks), walks
    assert max(levels for levels, _ in walks) > walks[0][0], walks
    assert any("local 'trainer'" in str(c) for c in chains), chains


def test_a_deeper_walk_never_waits_for_more_than_the_credits_ceiling(fake):
    """However many passes the walk cut short made, the next waits for no
    more credit than the walks keep (max(1 s, snapshot_walk_s)): it would
    otherwise never run."""
    kept = []
    with vtt.track(walk_fraction=0.25, snapshot_walk_s=0.5) as tr:
        for i in range(3):
            vtt.mark(f"iteration {i}")
            kept.append(torch.ones(4) * i)
        walks = tr.walks
        tr._deepen = 10 ** 6                         # a walk cut after a million passes
        tr._pass_cost, tr._credit = 0.01, tr._credit_ceiling()
        vtt.mark("iteration 3")
        assert tr.walks == walks + 1, (tr.walks, tr.walks_postponed)
    del kept


def test_a_mark_whose_credit_pays_no_walk_names_the_local_that_keeps_a_graph(fake):
    """A validation that sums its losses as tensors keeps every batch's
    graph, and the activations it saved, in a local: no frame holds the
    saved tensors themselves, and a mark (or a tick) whose credit paid no
    heap walk named no holder for them (CI, stop 102: a tick's walk on a
    loaded machine spent its time on heap passes). The walk of the running
    frames alone reads the autograd graphs for the nodes that save them
    and the frames for the graph's newest tensor: the chain starts at the
    local."""
    w = torch.ones(8, 8, requires_grad=True)
    saved = []
    with vtt.track(walk_fraction=0.25) as tr:
        total = 0
        for i in range(4):
            vtt.mark(f"iteration {i}")
            tr._credit, tr._pass_cost = 0.0, 1.0     # no heap walk fits
            tr._earned, tr._frames_spent = 1.0, 0.0  # the frames' share does
            h = (torch.ones(4, 8) * i).relu()
            saved.append(tr.tensor_id(h))
            total = total + (h @ w).sum()   # the product saves h
            del h
        vtt.mark("iteration 4")
        assert tr.walks == 0 and tr.frame_walks >= 1, (tr.walks, tr.frame_walks)
        paths = fake.paths_to(saved[0])
        assert any("local 'total' in " in str(p) and "MmBackward0" in str(p)
                   for p in paths), paths
    del total


def test_a_tick_whose_time_pays_no_walk_names_the_local_that_keeps_a_graph(fake):
    """The same at a tick (a program whose marks have gone quiet, or that
    makes none): a tick whose sweep took its whole time (here 0.25 s of
    sleep, a loaded machine's wait) walks no heap; before, it named nothing
    at all, now the running frames' holders and the graphs they keep."""
    from vramtrace.torch import _marks
    w = torch.ones(8, 8, requires_grad=True)
    with vtt.track(walk_fraction=0.25) as tr:
        sweep = tr._sweep

        def slow_sweep(forced=False):
            time.sleep(_marks._TICK_WALK_S + 0.05)
            sweep(forced)
        total = 0
        h = (torch.ones(4, 8)).relu()
        tid = tr.tensor_id(h)
        total = total + (h @ w).sum()   # the product saves h
        del h
        tr.epoch += 2                   # h's use long past
        total = total + 0               # the sum in use (a validation's)
        tr._sweep = slow_sweep
        tr._earned, tr._frames_spent = 1.0, 0.0
        tr._on_mark("tick", "")
        assert tr.walks == 0 and tr.frame_walks == 1, (tr.walks, tr.frame_walks)
        paths = fake.paths_to(tid)
        assert any("local 'total' in " in str(p) and "MmBackward0" in str(p)
                   for p in paths), paths
    del total


def test_a_walk_with_no_time_left_for_a_graphs_roots_names_the_frames_that_hold_them(fake):
    """A walk whose heap passes spent its budget before the walk from the
    graphs' roots (the tensors whose grad_fn reaches the nodes that saved
    its stale tensors) still names what the running frames hold of those
    roots: here the roots' walk starts past its deadline, and the walker
    reads the running frames before giving up (_referrers' frames_only)."""
    w = torch.ones(8, 8, requires_grad=True)
    with vtt.track(walk_fraction=None) as tr:
        walk, calls, cut = tr._walk, [], []

        def roots_late(starts, seen, deadline, clock=time.perf_counter):
            calls.append(len(starts))
            if len(calls) == 1:
                return walk(starts, seen, deadline, clock)
            res = walk(starts, seen, clock() - 1.0, clock)   # no time left for the roots
            cut.append(res.cut_off and res.levels == 0)
            return res
        total = 0
        h = (torch.ones(4, 8)).relu()
        tid = tr.tensor_id(h)
        total = total + (h @ w).sum()   # the product saves h
        del h
        tr._walk = roots_late
        tr.epoch += 2                   # h's use long past
        total = total + 0               # the sum in use (a validation's)
        tr._on_mark("mark", "")
        assert len(calls) == 2 and tr.walks == 1 and cut == [True], (calls, tr.walks, cut)
        paths = fake.paths_to(tid)
        assert any("local 'total' in " in str(p) and "MmBackward0" in str(p)
                   for p in paths), paths
    del total
