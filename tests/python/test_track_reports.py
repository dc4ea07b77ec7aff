"""track() + `vramtrace check` on leaks modelled on public reports (leaks/):
each leak twin flagged with the storages it keeps and the holder a user
would look for named on their paths, each fixed twin clean.

The programs (docstrings say which reports): a forward hook that stashes
every batch, a custom autograd.Function that keeps its output on ``ctx`` (a
cycle through its graph node), a LambdaLR lambda that captures its trainer
(a cycle that keeps every fold's model and optimizer state), an optimizer
that keeps the parameters and state of every head the model replaced, a
gradient hook registered on a parameter every step (each one's mask is used
at every backward, so nothing lingers: the line's live bytes grow step over
step), a validation loss kept with its graph (every line's activations, one
cause), each step's whole model output kept (a transformers-style ModelOutput:
one cause; the model's unused buffer and frozen head are its state, not
findings), a causal mask cached per sequence length by an unbounded
functools.lru_cache (held by the cache, named with the call's arguments),
a padding mask cached by the decorator's default (bounded) lru_cache keyed
by the batch tensor (its result and its key each named as the cache's),
a DataLoader cycled with itertools.cycle for an endless run (every batch of
its first pass saved: held by the cycle, named as its field), a few rows of
each batch's output kept as slices (each keeps its whole
batch's buffer: the report says what the slice covers), an evaluation loss
logged lazily with its graph to a logger whose handler buffers its records
(held by the logging module's objects, named from the program's logger), a
saved_tensors_hooks pack hook that returns the tensor it was given, around an
evaluation without no_grad (each saved output keeps its own grad_fn: a cycle
through C++ no collection frees; named, and said why, as one cause).
And one observer effect the walks must not have on such programs: a kept
graph's tensors saved through checkpointing's hooks are never unpacked. They run on the CPU with the holder walks unbudgeted (run_leak.py
says why)."""

from __future__ import annotations

import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                                reason=f"needs torch >= 2, this is {torch.__version__}")

from conftest import run_traced, vt_check, vt_cli  # noqa: E402

LEAKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "leaks")

# program -> (words of which one names the holder on a flagged storage's path,
#             the rule that flags it)
# Tensors named in the user's words: a parameter by its model's name for it,
# or, when no model holds it any more, by the user's line that first used it
# (nn.Linear's own lines make its memory).
NAMES = {
    "lambda_scheduler_cycle": ["Linear.weight", "Linear.weight.grad"],
    "replaced_head_optimizer": ['parameter, first used by "self.head = nn.Linear(D, H, bias=False)'],
}
REPORTS = {
    "hook_stash": (["Program.features"], "linger"),
    "ctx_attribute_cycle": (["GeluBackward.out", "GeluBackward.x"], "cycle"),
    "lambda_scheduler_cycle": (["closure cell 'self' of <lambda>"], "cycle"),
    "replaced_head_optimizer": (["Adam.state", "Adam.param_groups"], "linger"),
    "param_hook_closure": (["._backward_hooks → OrderedDict[0] → function <lambda"], "growth"),
    "kept_validation_graph": (["Program.history → list["], "linger"),
    "kept_model_outputs": (["Program.history → list["], "linger"),
    "lru_cache_masks": (["Program.mask → lru_cache causal_mask's cache[("], "linger"),
    "lru_cache_by_batch": (["lru_cache padding_mask's cache[(<Tensor>,)] → tensor",
                            "lru_cache padding_mask's cache.key (<Tensor>,) → tuple[0] → tensor"],
                           "linger"),
    "kept_output_slices": (["Program.recons → list["], "linger"),
    "cycled_loader": (["Program.batches → cycle.saved → list["], "linger"),
    "logged_eval_loss": (["module logged_eval_loss.log → Logger.handlers → list[0] → "
                          "MemoryHandler.buffer → list["], "linger"),
    "packed_output_cycle": (["(cycle) tensor 'out = self.model(xv)"], "linger"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs(program, twin)``: run_leak.py's run of it, checked, made once
    and read by every test that asks (each is a torch process)."""
    done: dict = {}

    def run(program: str, twin: str) -> tuple:
        if (program, twin) not in done:
            out = str(tmp_path_factory.mktemp(f"{program}-{twin}") / f"{twin}.vtsnap")
            info = run_traced(os.path.join(LEAKS, "run_leak.py"),
                              [program, twin, out, "unbudgeted"], out, extra_path=(LEAKS,),
                              timeout=300)
            assert info["errors"] == 0
            done[program, twin] = (info, *vt_check(info["snap"]))
        return done[program, twin]
    return run


@pytest.mark.parametrize("program", sorted(REPORTS))
def test_report_leak_is_flagged_with_its_holder_named(program, runs):
    words, rule = REPORTS[program]
    info, rc, rep = runs(program, "leak")
    expect = {int(a, 16): n for a, n in info["expect"].items()}
    assert expect, "the program retained nothing"
    assert rc == 1
    found = {int(f["addr"], 16): f for f in rep["findings"]}
    text = "\n".join(f"{f['addr']} {f['rule']} {[p['text'] for p in f['paths']]}"
                     for f in rep["findings"])
    if rule == "growth":
        # one finding for the line, on one of its storages, its bytes the growth
        (f,) = rep["findings"]
        assert f["rule"] == "growth" and int(f["addr"], 16) in expect, text
        assert f["bytes"] >= (len(expect) - 1) * min(expect.values()), f["bytes"]
        assert f"{program}.py:" in f["owner"]["name"], f["owner"]
        assert any(w in p["text"] for w in words for p in f["paths"]), text
        return
    for addr, nbytes in expect.items():
        assert addr in found, f"not flagged: {hex(addr)}\n{text}"
        f = found[addr]
        assert (f["bytes"], f["rule"]) == (nbytes, rule), (hex(addr), f["bytes"], f["rule"])
        paths = [p["text"] for p in f["paths"]]
        assert any(w in p for w in words for p in paths), (hex(addr), paths)
    owners = {f["owner"]["name"] for f in rep["findings"]}
    for name in NAMES.get(program, []):
        assert any(o.startswith(name) for o in owners), (name, owners)
    # one bug: a few causes (the kinds of tensor it keeps: a kept trainer's
    # optimizer state, weight, bias and their grads), not one per storage
    groups = rep["groups"]
    assert sum(g["count"] for g in groups) == len(rep["findings"])
    assert len(groups) <= 5 and len(groups) < len(rep["findings"]), groups
    assert f"{program}.py:" in groups[0]["owner"] + groups[0]["path"], groups[0]


def test_a_kept_slice_of_each_batch_says_it_keeps_the_whole_buffer(runs):
    """The VAE's kept reconstructions (``recon[:8].detach()``, no view to
    PyTorch): each batch's output buffer lingers for the 8 rows kept, and
    the finding says so: what is kept covers 8 of its 64 rows, the rest
    is held for it (its "kept_part"), and a copy would free it."""
    from leaks.kept_output_slices import BATCH, KEEP, PIXELS
    info, rc, rep = runs("kept_output_slices", "leak")
    assert rc == 1
    expect = {int(a, 16) for a in info["expect"]}
    found = [f for f in rep["findings"] if int(f["addr"], 16) in expect]
    assert found and len(found) == len(expect), rep["findings"]
    buffer, rows = BATCH * PIXELS * 4, KEEP * PIXELS * 4
    for f in found:
        assert f["rule"] == "linger" and f["bytes"] == buffer, f
        kept = f["kept_part"]
        assert kept is not None, f
        assert (kept["covered_bytes"], kept["wasted_bytes"]) == (rows, buffer - rows), kept
        assert kept["views_live"] == 1, kept
        assert "kept = recon[:KEEP].detach()" in kept["views"][0]["name"], kept
        assert kept["owner_dropped"]["seq"] < f["lingering_from"]["seq"], f
    info, rc, rep = runs("kept_output_slices", "fixed")
    assert rc == 0 and rep["findings"] == [], rep["findings"]


def test_a_kept_graph_is_one_cause_named_by_its_holder(runs):
    """A kept validation loss keeps the activations of every line of the
    model through its graph (attention's q, k and v views of one buffer
    among them, each saved by the attention's node): one cause, held by the
    history list through the loss's graph."""
    info, rc, rep = runs("kept_validation_graph", "leak")
    assert rc == 1
    groups = rep["groups"]
    assert len(groups) == 1, [(g["count"], g["owner"], g["path"]) for g in groups]
    (g,) = groups
    assert g["count"] == len(rep["findings"]) and g["lines"] > 3, g
    assert "Program.history → list[*] → tensor" in g["path"] and ".grad_fn" in g["path"], g


def test_kept_model_outputs_are_one_cause_and_the_models_state_is_none(runs):
    """Each step's whole ModelOutput kept (its logits, loss and key/value
    cache: three lines of the model): one cause, held by the history list
    through the output object, never through a lone "dict" (the object's
    own __dict__ is the object's). The model's unused causal-mask buffer and
    its frozen head, which its fixed twin keeps too, are not findings."""
    info, rc, rep = runs("kept_model_outputs", "leak")
    assert rc == 1
    groups = rep["groups"]
    assert len(groups) == 1, [(g["count"], g["owner"], g["path"]) for g in groups]
    assert groups[0]["lines"] >= 3, groups[0]
    assert "Program.history → list[*] → ModelOutput[" in groups[0]["path"], groups[0]
    paths = [p["text"] for f in rep["findings"] for p in f["paths"]]
    assert paths and not any(p.startswith("dict[") for p in paths), paths
    assert not any("_buffers" in p or "aux_head" in p for p in paths), paths


@pytest.mark.parametrize("program", sorted(REPORTS))
def test_report_fixed_twin_is_clean(program, runs):
    info, rc, rep = runs(program, "fixed")
    assert rep["findings"] == [], [f["paths"] for f in rep["findings"]][:3]
    assert rc == 0
    assert rep["tensors"] > 0 and rep["marks"] >= 6


def test_a_cycle_through_a_pack_hooks_saved_output_is_one_cause_and_says_why(runs):
    """What an evaluation's graph saved through a pack hook that returns its
    tensor (leaks/packed_output_cycle.py): the outputs ReLU and Tanh saved as
    themselves and the batch and activations the Linear layers saved, held
    by nothing in Python. Read without unpacking (a SavedTensor's data is
    what the pack hook returned), the graph's own output is found holding
    itself: one cause, its chain a cycle from that output through its
    grad_fn, and the report says why no collection frees it and what to
    return from the hook."""
    info, rc, rep = runs("packed_output_cycle", "leak")
    assert rc == 1
    groups = rep["groups"]
    assert len(groups) == 1, [(g["count"], g["owner"], g["path"]) for g in groups]
    assert groups[0]["path"].startswith("(cycle) tensor 'out = self.model(xv) "
                                        "(packed_output_cycle.py:"), groups[0]
    assert groups[0]["count"] == len(rep["findings"]) >= len(info["expect"]), groups[0]
    text = subprocess.run([vt_cli(), "check", info["snap"]], capture_output=True, text=True,
                          timeout=120).stdout
    assert "a saved_tensors_hooks pack hook returned the tensor it was given" in text, text
    assert "returns t.detach()" in text, text


def test_walks_never_unpack_a_saved_tensor_through_the_programs_hook(real_lib):
    """Activation checkpointing (non-reentrant) saves a forward's tensors
    through hooks whose unpacking recomputes the forward. A holder walk that
    read a kept graph's saved tensors ran the program's forward again at each
    mark (nanoGPT with checkpointed blocks and a kept validation loss:
    2.15 GiB allocated under track() against 100 MiB without): the walks
    leave such saved tensors unread, so the program's forward runs as often
    as without track()."""
    import contextlib

    import torch.utils.checkpoint as checkpoint
    import vramtrace.torch as vtt
    calls = {"n": 0}

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            return torch.relu(self.fc(x))

    def forwards(tracked: bool) -> int:
        torch.manual_seed(0)
        block, kept = Block(), []
        calls["n"] = 0
        with vtt.track(walk_fraction=None) if tracked else contextlib.nullcontext() as tr:
            for i in range(8):
                if tracked:
                    vtt.mark(f"step {i}")
                x = torch.randn(64, 32, requires_grad=True)
                # kept with its graph, as a validation loss without no_grad()
                kept.append(checkpoint.checkpoint(block, x, use_reentrant=False).sum())
        if tracked:
            assert tr.walks > 0 and tr.errors == 0, (tr.walks, tr.errors)
        return calls["n"]

    assert forwards(False) == 8
    assert forwards(True) == 8


def test_a_compiled_models_kept_graph_is_one_cause_named_in_the_programs_words(runs):
    """A torch.compile'd model (aot_eager, leaks/compiled_kept_graph.py): its
    backward is an autograd.Function whose tensors live in
    ctx.save_for_backward, and its graphs run as torch.fx's generated code
    (<eval_with_key>.N). Kept losses are still one cause held by the program's
    list, their tensors named by the program's file; the fixed twin is clean."""
    info, rc, rep = runs("compiled_kept_graph", "leak")
    assert rc == 1
    groups = rep["groups"]
    assert len(groups) == 1, [(g["count"], g["owner"], g["path"]) for g in groups]
    assert "Program.history → list[*] → tensor" in groups[0]["path"], groups[0]
    assert ".grad_fn" in groups[0]["path"], groups[0]
    owners = {f["owner"]["name"] for f in rep["findings"]}
    assert owners and not any("<eval_with_key>" in o for o in owners), owners
    assert all("compiled_kept_graph.py:" in o for o in owners), owners
    info, rc, rep = runs("compiled_kept_graph", "fixed")
    assert rc == 0 and rep["findings"] == [], rep["findings"][:3]
