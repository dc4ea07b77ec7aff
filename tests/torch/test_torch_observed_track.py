"""`vramtrace run --track -- python train.py` on a program that never
imports vramtrace: PyTorch's caching allocator observed
(vramtrace/_autorun.py, native/pool_observer.cpp) and track() recording the
program's tensors, so that `check` names what holds a leak: a module's list,
a thread's, a kept exception's traceback, a loaded checkpoint, a gradient by
its parameter, a row pinning its batch's output; past a ring the run
overran and for tensors made before the window (declared again); a
program importing vramtrace.torch before torch, the threads it starts, its
DataLoader workers' snapshots beside its own; a validation pass after
marked training (its marks gone quiet, ticked again); and without the C
extension, said once. Each case runs its programs (train_leak.py and others) in their
own processes on the simulated device; this driver never imports torch.
Plain `run`'s findings: test_torch_observed_leaks.py; what stays as without
vramtrace: test_torch_observed_recording.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from typing import Dict, Tuple

import pytest

from observed_helpers import CLI, HERE, LOGITS_LINE, SCRIPT, SIMRUN, snapshot_json, train
from procs import pytorch_exit_abort, pytorch_ipc_child_exit_crash, pytorch_ipc_exit_crash, run


def _traced_twins(tmp_path, prog_name: str, marker: str, said: str, times: int,
                  *check_args: str) -> Tuple[int, Dict[str, Tuple[str, str, int, str]]]:
    """A leak-and-fixed scenario of this folder, ``prog_name leak`` run
    untraced (it prints ``times`` lines starting with ``said``), then each
    twin under `run --track` (exit 0; the leak prints what it printed
    untraced) and its snapshot checked with ``check_args``: the line of
    the program that holds ``marker``, and {kind: (snapshot, run's output,
    check's exit status, check's output)}."""
    prog = os.path.join(HERE, prog_name)
    line = next(i for i, text in enumerate(open(prog), 1) if marker in text)
    # (untraced, a program's stand-in for device time is spent for nothing
    # compared: quiet_validation.py spins 4 s a run)
    rc, plain = run([SIMRUN, "--mem", "1G", "--", sys.executable, prog, "leak"],
                    env={"DEVICE_TIME_S": "0"})
    plain_said = [ln for ln in plain.splitlines() if ln.startswith(said)]
    # the untraced baseline may die of PyTorch's own abort at exit after
    # printing everything (procs.pytorch_exit_abort; CI, stop 82)
    assert (rc == 0 or pytorch_exit_abort(rc, plain)) and len(plain_said) == times, \
        f"exit {rc}:\n{plain[-3000:]}"
    got = {}
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                       sys.executable, prog, kind])
        assert rc == 0, out[-3000:]
        if kind == "leak":
            assert [ln for ln in out.splitlines() if ln.startswith(said)] == plain_said
        rc, text = run([CLI, "check", snap, *check_args])
        got[kind] = (snap, out, rc, text)
    return line, got


def test_run_track_longer_than_the_ring_still_names_the_holder(tmp_path):
    """train_leak.py leak under `run --track` with a ring (2048 events) that
    the run overflows three times: the list `history` was declared as a
    holder, and the module's reference to it asserted, at the first walk;
    those events are gone by the snapshot. Its walk names its holders and
    asserts its references again, so the chain still reads from the module
    (before: `holder #*[*] → tensor ...`, the list nameless); and the logits
    made before the window are judged, their tensors declared again."""
    snap = str(tmp_path / "ring.vtsnap")
    out = train("leak", snap, "--steps", "40",
                run_args=("--track", "--conf", "max_events:2048"))
    assert "not observed" not in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 1, text[-3000:]
    assert "the ring overwrote the run's first" in text, text[:2000]
    assert re.search(r"held by: module __main__\.history → list\[\*\] → tensor "
                     rf"'logits = model\(x\) .*\(train_leak\.py:{LOGITS_LINE}\)'", text), \
        text[:4000]
    assert "holder #" not in text, text[:4000]
    # the logits kept before the window (40 steps, each 512 KiB), whose
    # TENSOR_NEWs the ring overwrote, were declared again (format 1.11):
    # judged like the window's, all but the last step's (still in use)
    rc, text = run([CLI, "check", snap, "--json"])
    j = json.loads(text)
    g = next(g for g in j["groups"] if f"train_leak.py:{LOGITS_LINE}" in g["owner"])
    assert g["count"] >= 38 and g["bytes"] >= g["count"] * 512 * 256 * 4, g
    assert g["older_alive"]["storages"] == 0, g     # none left unjudged
    early = [f for f in j["findings"] if f["last_use"]["before_window"]]
    assert early and all(f"train_leak.py:{LOGITS_LINE}" in f["owner"]["name"] for f in early), \
        j["findings"][:2]


def test_run_track_judges_a_leak_that_ended_before_the_window(tmp_path):
    """train_leak.py early: the first 10 steps' logits kept, then 50 more
    steps, under `run --track` with a ring of 4096 events that keeps the
    last 20-odd steps: every kept tensor was made, and last used, before
    the window. The tracker declared them again (format 1.11), so check
    judges them (before: "0 findings", the storages alive and their tensors
    unknown), names the script's line and the holder; the fixed twin under
    the same ring is clean."""
    snap = str(tmp_path / "early.vtsnap")
    train("early", snap, "--steps", "60", run_args=("--track", "--conf", "max_events:4096"))
    rc, text = run([CLI, "check", snap, "--json"])
    assert rc == 1, text[-3000:]
    j = json.loads(text)
    assert j["events_overwritten"] > 0, j["events_overwritten"]
    assert len(j["findings"]) == 10, [f["owner"] for f in j["findings"]]
    for f in j["findings"]:
        assert f"train_leak.py:{LOGITS_LINE}" in f["owner"]["name"], f["owner"]
        assert f["last_use"]["before_window"] and f["bytes"] == 512 * 256 * 4, f["last_use"]
    rc, text = run([CLI, "check", snap])
    assert re.search(r"held by: module __main__\.history → list\[\*\] → tensor "
                     rf"'logits = model\(x\) .*\(train_leak\.py:{LOGITS_LINE}\)'", text), \
        text[:4000]
    assert "last use: before the trace window, by tensor 'logits = model(x)" in text, text[:4000]
    snap = str(tmp_path / "fixed.vtsnap")
    train("fixed", snap, "--steps", "60", run_args=("--track", "--conf", "max_events:4096"))
    rc, text = run([CLI, "check", snap])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]


def test_run_track_judges_a_tensor_made_before_the_window_by_its_usual_gap(tmp_path):
    """train_leak.py fixed with a validation batch kept on the device and
    evaluated every 40 steps, 110 steps under `run --track` with a 4096-event
    ring: the window (the last 20-odd steps) holds no use of it, its last at
    step 80. The tracker declares it again with the longest rest it saw
    (39 marks): judged by that usual gap, it is not flagged (without it,
    "last use: before the trace window", a linger finding); told to wait
    3 steps (`--grace 3`) it is."""
    snap = str(tmp_path / "val.vtsnap")
    train("fixed", snap, "--steps", "110", "--validate-every", "40",
          run_args=("--track", "--conf", "max_events:4096"))
    rc, text = run([CLI, "check", snap])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]
    assert "the ring overwrote the run's first" in text, text[:3000]
    rc, text = run([CLI, "check", snap, "--grace", "3"])
    assert rc == 1 and "tensor 'val_x = torch.randn(2048, 256" in text, text[:3000]
    assert "last use: before the trace window" in text, text[:3000]


def test_run_track_names_the_holder_of_the_leaked_tensors(tmp_path):
    snap = str(tmp_path / "track.vtsnap")
    train("leak", snap, "--steps", "6", run_args=("--track",))
    rc, text = run([CLI, "check", snap])
    assert rc == 1, text
    # the script's module-level list `history`, then an item of it: the
    # tensor named by the script's line that made it, not torch's
    # (the causes list names the line; each finding also names the op)
    assert re.search(r"held by: module __main__\.history → list\[\*\] → tensor "
                     rf"'logits = model\(x\) .*\(train_leak\.py:{LOGITS_LINE}\)'",
                     text), text[:4000]
    assert re.search(r"module __main__\.history → list\[\d+\] → tensor 'logits = model\(x\) "
                     rf".*\(train_leak\.py:{LOGITS_LINE}, aten\.addmm out\[0\]\)'", text), text[:4000]


def test_run_track_tracks_a_program_that_imports_vramtrace_torch_before_torch(tmp_path):
    """`import vramtrace.torch` first: its own import of torch came before
    its track() existed, and tracking failed ("partially initialized module");
    it starts at the end of that import instead."""
    script = tmp_path / "train_first.py"
    script.write_text("import vramtrace.torch  # noqa\n" + open(SCRIPT).read())
    snap = str(tmp_path / "first.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                   sys.executable, str(script), "leak", "--steps", "6"])
    assert rc == 0, out[-4000:]
    assert "could not prepare" not in out, out[-4000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 1, text
    assert re.search(r"held by: module __main__\.history → list\[\*\] → tensor "
                     rf"'logits = model\(x\) .*\(train_first\.py:{LOGITS_LINE + 1}\)'",
                     text), text[:4000]


DATALOADER_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    dl = DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="spawn",
                    persistent_workers=True)
    model = torch.nn.Linear(8, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        for x, y in dl:
            loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
    print("done")


if __name__ == "__main__":
    main()
"""


def test_run_track_names_the_scripts_snapshot_beside_its_dataloader_workers(tmp_path):
    """DataLoader workers started with spawn import torch too, and under
    --track record their CPU tensors, so each writes a snapshot: -o's name
    goes to the script's process (the only one that used the device), the
    workers' keep their pids, and run's listing says they used no device. Before: every file kept its pid, and
    `vramtrace check run.vtsnap` found no file."""
    script = tmp_path / "loader.py"
    script.write_text(DATALOADER_SCRIPT)
    snap = tmp_path / "run.vtsnap"
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", str(snap), "--",
                   sys.executable, str(script)])
    assert rc == 0 and "done" in out, out[-4000:]
    files = sorted(p.name for p in tmp_path.glob("*.vtsnap"))
    assert "run.vtsnap" in files and len(files) == 3, (files, out[-3000:])
    # the listing says which used no device: the workers
    said = dict(re.findall(r"snapshot written to \S+/(\S+) \((.*)\)", out))
    assert sorted(said) == files, (said, out[-3000:])
    assert all(("no device memory" in what) == (name != "run.vtsnap")
               for name, what in said.items()), said
    sj = snapshot_json(str(snap))
    assert sj["meta"]["framework_allocator"] == "observed", sj["meta"]
    assert "loader.py" in sj["meta"]["command_line"], sj["meta"]
    for name in files:
        if name != "run.vtsnap":
            assert re.fullmatch(r"run-\d+\.vtsnap", name), files
            assert "spawn_main" in snapshot_json(str(tmp_path / name))["meta"]["command_line"]


def test_run_track_follows_the_threads_the_program_starts(tmp_path):
    """thread_leak.py: a thread the program starts averages the weights and
    runs a backward of its own; its leak twin keeps every average in a
    module-level list. run --track records that thread's ops too (before,
    only the thread that imported torch: its tensors had no holder, their
    findings no cause), and the program prints what it prints untraced."""
    prog = os.path.join(HERE, "thread_leak.py")
    line = next(i for i, text in enumerate(open(prog), 1) if "# AVG_LINE" in text)
    for kind in ("leak", "fixed"):
        rc, plain = run([SIMRUN, "--mem", "1G", "--", sys.executable, prog, kind])
        plain_steps = [ln for ln in plain.splitlines() if ln.startswith("step ")]
        assert len(plain_steps) == 8, plain[-3000:]
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                       sys.executable, prog, kind])
        assert rc == 0, out[-3000:]
        assert [ln for ln in out.splitlines() if ln.startswith("step ")] == plain_steps
        rc, text = run([CLI, "check", snap])
        if kind == "fixed":
            assert rc == 0, text
            continue
        assert rc == 1, text
        assert re.search(r"held by: module __main__\.averages → list\[\*\] → tensor "
                         rf"'avg = w\.clone\(\) if avg is None .*\(thread_leak\.py:{line}\)'",
                         text), text[:4000]
        assert "(inside it: run (" in text and "at average_weights (" in text, text[:4000]
        # the thread's backward allocates under the frames of its own forward
        # ops (autograd numbers each thread's nodes from 0: found by number
        # and thread), the main thread's under the main thread's
        sj = snapshot_json(snap)
        lent_frames = set()
        for sid in {lt["alloc_stack"] for lt in sj["lifetimes"]}:
            parts = []
            while sid and len(parts) < 512:   # a stack: (its parent, its frame)
                sid, f = sj["stacks"][sid]
                parts.append(sj["frames"][f]["function"])
            lent_frames.add(tuple(p for p in parts if p.startswith("forward of ")))
        assert any("forward of average_weights" in fs for fs in lent_frames), lent_frames
        assert any("forward of <module>" in fs for fs in lent_frames), lent_frames


def test_run_track_names_the_list_that_keeps_thousands_of_graph_tensors(tmp_path):
    """kept_eval_graphs.py: nanoGPT's estimate_loss without no_grad, its
    losses kept in a module-level list (found on nanoGPT's train.py). The
    snapshot's holder walk starts from each kept activation, more than its
    bound of holders: the chain must still reach the list (it stopped at
    the loss tensor while the bound counted the starts), within the
    snapshot's budget, and the program prints what it prints untraced."""
    line, got = _traced_twins(tmp_path, "kept_eval_graphs.py", "# EVAL_LINE", "eval ", 10)
    for kind, (snap, out, rc, text) in got.items():
        assert "holder walk at the snapshot" not in out, out[-3000:]
        if kind == "fixed":
            assert rc == 0, text
            continue
        assert rc == 1, text
        tensors = int(re.search(r"(\d+) tensors,", text).group(1))
        assert tensors > 4096, text[:2000]     # more than the default max_nodes
        assert re.search(r"held by: module __main__\.loss_curve → list\[\*\] → tensor "
                         r"'loss = F\.cross_entropy\(model\(x\), y\) .*"
                         rf"\(kept_eval_graphs\.py:{line}\)'\.grad_fn", text), text[:4000]


def test_run_track_names_a_checkpoint_kept_on_the_device_after_loading(tmp_path):
    """ckpt_sample.py, as nanoGPT's sample.py: a checkpoint loaded onto the
    device, its weights copied into the model, then tokens sampled under
    no_grad and autocast. Leak: the module's `checkpoint` and `state_dict`
    keep the loaded copy (weights and optimizer moments) on the device for
    the whole run -- named, made by the torch.load line. Fixed (deleted after
    loading): clean, and the model's own weights, which autocast's weight
    cache reads once, are not findings."""
    prog = os.path.join(HERE, "ckpt_sample.py")
    line = next(i for i, text in enumerate(open(prog), 1) if "# CKPT_LINE" in text)
    ckpt = str(tmp_path / "ckpt.pt")
    rc, out = run([sys.executable, prog, "save", ckpt])
    assert rc == 0 and os.path.exists(ckpt), out[-3000:]
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                       sys.executable, prog, kind, ckpt])
        tokens = re.search(r"tokens (\d+)", out)
        assert rc == 0 and tokens and int(tokens.group(1)) >= 2001, out[-3000:]
        rc, text = run([CLI, "check", snap])
        # the model's weights are its state (named TinyLM.up.weight, ...)
        assert "tensor 'TinyLM." not in text and "tensor 'parameter" not in text, text[:4000]
        if kind == "fixed":
            assert rc == 0, text[:4000]
            continue
        assert rc == 1, text[:4000]
        made = rf"'[^']*torch\.load\(path, map_location=\"cuda\"\)[^']*\(ckpt_sample\.py:{line}\)'"
        assert re.search(r"held by: module __main__\.checkpoint → dict\['optimizer'\] .*→ tensor "
                         + made, text), text[:4000]
        # one cause for the state dict's tensors, under many keys: blanked
        # in the cause's path, each finding's own key in its own
        assert re.search(r"held by: module __main__\.state_dict → OrderedDict\[\*\] "
                         r"→ tensor " + made, text), text[:4000]
        assert re.search(r"\n     module __main__\.state_dict → OrderedDict\['[a-z]+\.weight'\] "
                         r"→ tensor '[^']*torch\.load\(", text), text[:4000]
        # made by the load (its rebuild's set_ gives an empty tensor the
        # loaded memory), not "input, first used by" it
        assert re.search(rf"owner: tensor '[^']*torch\.load\([^']*\(ckpt_sample\.py:{line}, "
                         r"aten\.set_ out\[0\]\)'", text), text[:4000]
        assert "first used by" not in text, text[:4000]


def test_a_kept_exception_is_named_with_its_traceback_frame_and_local(tmp_path):
    """`failures.append(e)` keeps the step's activations through the
    exception's traceback: run --track names every hop up to the list."""
    prog = os.path.join(HERE, "stored_exception.py")
    line = next(i for i, text in enumerate(open(prog), 1) if "# RAISE_LINE" in text)
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                       sys.executable, prog, kind])
        assert rc == 0 and "failures 4" in out, out[-3000:]
        rc, text = run([CLI, "check", snap])
        if kind == "fixed":
            assert rc == 0, text
            continue
        assert rc == 1, text
        assert ("held by: module __main__.failures → list[*] → ValueError.__traceback__ → "
                "traceback.tb_next → traceback.tb_frame → "
                f"frame of step (stored_exception.py:{line}) local 'logits' → ") in text, text[:4000]


@pytest.mark.parametrize("track", [True, False], ids=["run-track", "run"])
def test_a_value_kept_every_step_is_named_by_its_blocks_and_its_list(track, tmp_path):
    """An actor-critic loop (actor_critic.py) keeps the critic's value of
    every environment step for a plot: a 4-byte tensor a step, each a
    512-byte block of PyTorch's cache. `check` weighs the cause by its
    blocks and, under --track, names the list; under plain `run`, where it
    sees blocks and not tensors, their call site (the critic's line); the
    twin keeping `value.item()` is clean. Before: the cause was weighed by the
    bytes asked for (3 KiB against a floor of 131 KiB) and the run said "0
    findings"."""
    prog = os.path.join(HERE, "actor_critic.py")
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *(["--track"] if track else []),
                       "-o", snap, "--", sys.executable, prog, kind])
        assert rc == 0 and "episodes 60, values " in out, out[-3000:]
        values = int(out.split("values ")[-1].split()[0])
        rc, text = run([CLI, "check", snap, "--json"])
        j = json.loads(text)
        if kind == "fixed":
            assert rc == 0 and j["findings"] == [], j["findings"][:2]
            continue
        assert rc == 1, text[-3000:]
        [g] = j["groups"]
        if track:
            # every value but the last episode's (still in use at the end)
            assert values - 30 <= g["count"] <= values and g["bytes"] == 4 * g["count"], g
            assert g["held_bytes"] == 512 * g["count"] and g["held_bytes"] > j["min_bytes"], g
            assert "self.critic(h) (actor_critic.py:" in g["owner"], g
        else:   # one finding for the call site's blocks
            [f] = j["findings"]
            n = f["allocations"]
            assert values - 30 <= n <= values and f["bytes"] == 4 * n, f
            assert f["block_bytes"] == 512 * n == g["held_bytes"] > j["min_bytes"], (f, g)
        rc, text = run([CLI, "check", snap])
        assert re.search(r"^vramtrace check: \d+ findings?, [\d.]+ KiB held after last use in "
                         r"[\d.]+ KiB of blocks", text), text[:2000]
        if track:
            assert re.search(r"held by: frame local 'value_log' in main actor_critic\.py:\d+ → "
                             r"list\[\*\] → tensor 'return F\.softmax", text), text[:4000]
        else:   # (its blocks: 845 of them, not one)
            assert re.search(r"\n#1 \[[\w-]+\] storage 0x[0-9a-f]+ on cuda:0, [\d.]+ KiB "
                             r"\(blocks [\d.]+ KiB\) in \d+ allocations\n", text), text[:4000]
            assert re.search(r"\n     at forward \(\S*actor_critic\.py:\d+, def at line \d+\)\n"
                             r"     at act \(", text), text[:4000]


@pytest.mark.parametrize("track", [True, False], ids=["run-track", "run"])
def test_attention_maps_each_layer_keeps_are_one_cause_through_both_layers(track, tmp_path):
    """attention_maps.py: a graph attention network (pytorch/examples'
    gat/main.py's shape) whose two layers each append every forward's
    attention map to a list of their own. Under --track: one cause, its
    line, held through the model's dict of modules with the key blanked
    (both layers keep them); plain `run`: the softmax's line grows step
    over step; the twin keeping the last map only is clean."""
    prog = os.path.join(HERE, "attention_maps.py")
    line = next(i for i, text in enumerate(open(prog), 1)
                if "attention = F.softmax(e, dim=-1)" in text)
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *(["--track"] if track else []),
                       "-o", snap, "--", sys.executable, prog, kind])
        assert rc == 0 and "epochs 30, maps " in out, out[-3000:]
        rc, text = run([CLI, "check", snap])
        if kind == "fixed":
            assert rc == 0 and "0 findings" in text, text[:3000]
            continue
        assert rc == 1 and re.search(r"findings? from 1 cause", text), text[:3000]
        if track:
            assert re.search(rf"tensor 'attention = F\.softmax\(e, dim=-1\) \(attention_maps\.py:{line}\)'\n"
                             r"     held by: frame local 'model' in main attention_maps\.py:\d+ → "
                             r"GAT\._modules → dict\[\*\] → GraphAttentionLayer\.attention_log → "
                             r"list\[\*\] → tensor", text), text[:3000]
            assert "dict['gat1']" in text and "dict['gat2']" in text, text[:6000]
        else:
            assert re.search(rf"\[growth\].*\n.*allocated at forward \(\S*attention_maps\.py:{line}\)",
                             text), text[:3000]


def test_gradients_left_on_parameters_in_use_are_state_not_findings(tmp_path):
    snap = str(tmp_path / "eval.vtsnap")
    prog = os.path.join(HERE, "eval_after_training.py")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                   sys.executable, prog])
    assert rc == 0 and "grads kept 4" in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 0, text


def test_a_kept_gradient_is_named_after_its_parameter(tmp_path):
    snap = str(tmp_path / "grad.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                   sys.executable, os.path.join(HERE, "kept_grad.py")])
    assert rc == 0 and "kept (1024, 128)" in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 1, text
    assert "owner: tensor 'Net.fc1.weight.grad'" in text, text[:4000]
    assert "module __main__.keep → tensor 'Net.fc1.weight.grad'" in text, text[:4000]


def _tracked_leak_and_clean_twin(script: str, printed: str, tmp_path) -> Tuple[int, str, str]:
    """``script leak|fixed`` under `vramtrace run --track` on the device,
    each printing ``printed``; the fixed twin's `check` must pass. The
    leak's `check` (exit status, text) and the fixed twin's text."""
    prog = os.path.join(HERE, script)
    got: Dict[str, Tuple[int, str]] = {}
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                       sys.executable, prog, kind])
        assert rc == 0 and printed in out, out[-3000:]
        got[kind] = run([CLI, "check", snap])
    rc, fixed = got["fixed"]
    assert rc == 0, fixed[:4000]
    return got["leak"][0], got["leak"][1], fixed


def test_one_list_a_trainer_keeps_is_one_cause_whichever_frame_reached_the_trainer(tmp_path):
    """trainer_preds.py, laid out as pytorch/examples' minGPT-ddp trainer:
    the walks during training reach the trainer through `_run_batch`'s
    `self`, the exit's through `main`'s `trainer`; the predictions its list
    keeps are one cause (minGPT's twin read "303 findings from 2 causes"),
    and each finding still says the root its walk came in by."""
    rc, text, _ = _tracked_leak_and_clean_twin("trainer_preds.py", "batches 32", tmp_path)
    assert rc == 1, text[:4000]
    assert re.search(r"\d+ findings from 1 cause", text), text[:4000]
    assert re.search(r"held by: frame local '\w+' in \w+ trainer_preds\.py:\d+ → Trainer\.preds"
                     r" → list\[\*\] → tensor 'pred = logits\.argmax\(-1\)", text), text[:4000]
    rc, every = run([CLI, "check", "--top", "0", str(tmp_path / "leak.vtsnap")])
    roots = set(re.findall(r"frame local '(\w+)' in (\w+) trainer_preds\.py:\d+ → Trainer\.preds"
                           r" → list\[\d+\]", every))
    assert {("self", "_run_batch"), ("trainer", "main")} <= roots, roots


def test_a_length_curriculum_is_no_growth_and_a_buffer_rebuilt_larger_each_step_is(tmp_path):
    """length_curriculum.py: batches sorted by length, shortest first, each
    step's logits bound across the step's end, larger every step: each made
    afresh by the model, the one before let go, so no leak (before: "grows
    ... per step" on the model's line, exit status 1). Its twin also keeps
    the last positions' logits in one tensor rebuilt by torch.cat onto
    itself every step: made from the one before, a leak, named by its line
    and by the local that holds it."""
    rc, text, fixed = _tracked_leak_and_clean_twin("length_curriculum.py", "steps 24", tmp_path)
    assert "0 findings" in fixed, fixed[:4000]
    assert re.search(r"\d+ lines? grew only as (its|their) value was replaced each step by a "
                     r"larger one made afresh", fixed), fixed[:4000]
    assert rc == 1, text[:4000]
    assert "1 finding," in text and "[growth]" in text, text[:4000]
    assert re.search(r"#1 \[growth\].*\n.*grows 64 KiB per step", text), text[:4000]
    line = next(i for i, l in enumerate(open(os.path.join(HERE, "length_curriculum.py")), 1)
                if "kept = torch.cat([kept, logits" in l)
    assert f"length_curriculum.py:{line}," in text, text[:4000]
    # used every step, never stale: walked as a value rebuilt larger from
    # itself (before: "no holder found ... held from C++")
    assert re.search(r"frame local 'kept' in main length_curriculum\.py:\d+ → tensor 'kept = "
                     r"torch\.cat", text), text[:4000]
    # asked for by name, growth judges the curriculum's lines as before
    rc, asked = run([CLI, "check", "--rules", "growth", str(tmp_path / "fixed.vtsnap")])
    assert rc == 1 and "[growth]" in asked and "grew only as" not in asked, asked[:4000]


def test_an_evaluation_without_marks_names_its_leak_and_keeps_no_model_state(tmp_path):
    """No optimizer step, so no mark (an inference or Trainer.evaluate()
    script): the tracker ticks instead (a mark's work without a MARK). The
    model moved by .to("cuda") is used where it lives, its never-read
    causal-mask buffer is its state: the fixed twin is clean (before: the
    buffer, and every parameter until the move was found, flagged); the kept
    logits are one cause with their holder named."""
    rc, text, fixed = _tracked_leak_and_clean_twin("eval_only.py", "batches 24", tmp_path)
    assert " 0 marks," in text and " 0 marks," in fixed, (text[:2000], fixed[:2000])
    assert rc == 1, text
    assert "from 1 cause" in text, text[:4000]
    assert "held by: module __main__.kept → list[*] → tensor 'return self.head(" in text, \
        text[:4000]


def test_a_short_run_whose_first_walk_is_deep_still_names_its_holder(tmp_path):
    """An EMA of the model (swa_utils.AveragedModel) evaluated every 5
    steps, 30 steps in about a second: its first mark walks from the
    average's parameters, unused yet, whose holders are deep (parameter
    dict, layer, module dict, Sequential, AveragedModel, main's local).
    That walk took the credit such a short run earns (a heap pass a level,
    cut short; now, past three levels, one index of the heap's references
    makes it cheaper: _trackfast.ReferrerIndex), and no later mark could pay
    a walk, so the kept outputs were found with "no holder found". Now a
    mark that cannot pay a walk still names what the running frames hold
    (_Walks._walk_frames_only): the list, a local of main(). Its fixed twin
    (argmax on the host, under no_grad) passes."""
    rc, leak, _ = _tracked_leak_and_clean_twin("ema_eval_kept.py", "evaluations 6", tmp_path)
    assert rc == 1, leak[:4000]
    line = next(i for i, text in enumerate(open(os.path.join(HERE, "ema_eval_kept.py")), 1)
                if "# EVAL_LINE" in text)
    assert re.search(rf"tensor 'evals\.append\(ema\(val\)\) \(ema_eval_kept\.py:{line}\)'\n"
                     r"     held by: frame local 'evals' in main ema_eval_kept\.py:\d+ → list\[\*\]",
                     leak), leak[:4000]


def test_a_replay_memorys_transitions_drawn_at_random_are_no_leak(tmp_path):
    """PyTorch's DQN tutorial keeps its transitions in a deque and draws a
    batch of them at random each step: a transition waits a few steps
    between draws, and after its last until the deque evicts it. `check`
    flagged every one as lingering (715 findings on the tutorial with a
    full memory of 200); its line's tensors are drawn from at random, and
    their grace is what a draw may miss (check_sampled.c): the fixed twin is
    clean. The leak keeps every transition in a list besides, so an evicted
    one is never drawn again: flagged, and named through the list and the
    namedtuple (the walks of the running frames read one container deep
    before: "no holder found")."""
    rc, text, _ = _tracked_leak_and_clean_twin("dqn_replay.py", "transitions", tmp_path)
    # the fixed twin's actions move from the random line to the policy's as
    # exploration decays: no growth, not even a minor one (before
    # co_freed_grow: "[growth] 240 B" at the policy's line)
    rc_fixed, fixed = run([CLI, "check", str(tmp_path / "fixed.vtsnap"), "--min-bytes", "0",
                           "--rules", "growth"])
    assert rc_fixed == 0 and "[growth]" not in fixed, fixed[:4000]
    assert rc == 1, text[:4000]
    assert re.search(r"\d+ × \[linger\] [^\n]*\n"
                     r"     tensor 'return seen_as\.to\(\"cuda\"\)\.unsqueeze\(0\) "
                     r"\(dqn_replay\.py:\d+\)'[^\n]*\n"
                     r"     held by: module __main__\.seen → list\[\*\] → Transition\[\*\]",
                     text), text[:4000]
    assert "drawn from at random" in text, text[:4000]


def test_a_full_replay_memory_in_a_run_longer_than_the_ring_is_no_growth(tmp_path):
    """The fixed twin of dqn_replay.py in a ring of 4 MiB (the run's first
    four fifths overwritten): the transitions made before the window are
    evicted in it by frees whose ALLOC is gone, and the line seemed to hold
    only the window's, growing ("1 finding, 264 KiB", a growth). Each free
    names its block's allocation stack (format 1.12; a file older than that:
    the tracker's declarations say where their tensors were made,
    check_window_sites.c): the full memory is clean."""
    snap = str(tmp_path / "wrapped.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "--conf", "ring:4MiB",
                   "-o", snap, "--", sys.executable, os.path.join(HERE, "dqn_replay.py"),
                   "fixed"])
    assert rc == 0 and "transitions" in out and "the ring is full" in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert "window: the ring overwrote the run's first" in text, text[:4000]
    assert rc == 0, text[:4000]


def test_rows_of_each_batchs_output_kept_pin_the_whole_outputs(tmp_path):
    """``kept.append(out[:, 0])``: the row keeps its batch's whole output
    through its ``_base``, which PyTorch keeps alive with its Python object
    (no death is seen); the tracker drops such a base at a mark or tick, and
    `check`'s pinned rule names the row. Its twin (``.clone()``) is clean.
    Before: 0 findings for the pinned one too."""
    rc, text, _ = _tracked_leak_and_clean_twin("kept_cls.py", "embeddings (320, 128)",
                                               tmp_path)
    assert rc == 1, text
    assert "[pinned]" in text and "[linger]" not in text, text[:4000]
    assert "tensor 'cls = out[:, 0] (kept_cls.py:" in text, text[:4000]


def test_rows_of_each_batchs_detached_output_kept_pin_the_whole_outputs(tmp_path):
    """``kept.append(out.detach()[:, 0])``: the row's ``_base`` is the
    detached tensor, which shares the output's storage without being a
    view, and which PyTorch keeps alive for the row; dropped at a mark or
    tick like a base only views keep, so the pinned rule names the row.
    Before: 0 findings (the detached tensor covered the whole storage)."""
    snap = str(tmp_path / "detached.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                   sys.executable, os.path.join(HERE, "kept_cls.py"), "detached"])
    assert rc == 0 and "embeddings (320, 128)" in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 1, text[:4000]
    assert "[pinned]" in text and "[linger]" not in text, text[:4000]
    assert re.search(r"held by: module __main__\.kept → list\[\*\] → tensor "
                     r"'cls = out\.detach\(\)\[:, 0\] .*\(kept_cls\.py:\d+\)'", text), text[:4000]


def test_run_track_without_the_extension_says_it_records_nothing(tmp_path):
    """The declared limit of track() (docs/limitations.md): where the C
    extension is not built for the Python in use (here: a library with no
    build tree beside it, so no vramtrace._trackfast to import), `run
    --track` says so once, why and what to do, and the program runs and
    prints as without vramtrace."""
    lib = tmp_path / "lib" / os.path.basename(os.environ["VRAMTRACE_LIB"])
    lib.parent.mkdir()
    shutil.copy(os.environ["VRAMTRACE_LIB"], lib)
    prog = tmp_path / "prog.py"
    prog.write_text("import torch\nx = torch.ones(3, device='cuda') * 2\n"
                    "print('result', tuple(x.shape))\n")   # the simulator computes nothing
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o",
                   str(tmp_path / "t.vtsnap"), "--", sys.executable, str(prog)],
                  {"VRAMTRACE_LIB": str(lib)}, cwd=tmp_path)
    assert rc == 0 and "result (3,)" in out, out[-3000:]
    said = [line for line in out.splitlines() if "records nothing" in line]
    assert len(said) == 1, out[-3000:]
    assert said[0].startswith("vramtrace run: vramtrace.torch.track() records nothing: ") and \
        "vramtrace._trackfast" in said[0] and "rebuild or reinstall" in said[0], said


HOGWILD = os.path.join(HERE, "hogwild.py")


def test_run_track_names_the_holder_in_each_hogwild_trainer(tmp_path):
    """hogwild.py (pytorch/examples' mnist_hogwild shape): a CUDA model
    shared with two spawned trainers through CUDA IPC (a memory handle and
    an interprocess event per storage). Under run --track the program prints
    what it prints untraced (the steps each trainer wrote into a shared CUDA
    tensor, read back by the parent); each trainer's snapshot names its
    module's list as the holder of the activations it kept; the fixed twin's
    three snapshots are clean; `vramtrace check` reads the three at once.
    Before the simulated device had interprocess events, the program died
    at the first shared storage (cudaIpcGetEventHandle: operation not
    supported)."""
    line = next(i for i, text in enumerate(open(HOGWILD), 1)
                if "h = F.relu(self.fc1(x))" in text)

    def said(out: str) -> list:
        # the trainers' lines can interleave (two processes, one pipe)
        return sorted(re.findall(r"trainer \d: \d+ steps|exit codes \[.*?\]|"
                                 r"steps read back \[.*?\]", out))

    # Either run may die at exit of PyTorch's own crash after sharing CUDA
    # tensors (procs.pytorch_ipc_exit_crash): 1 run in about 50 with or
    # without vramtrace, once all is printed and every snapshot written.
    # What both twins print untraced, known from its arguments (12 steps
    # each, both trainers exiting 0): not run untraced here, three
    # processes that import torch for lines a run of it always printed.
    plain = "trainer 0: 12 steps\ntrainer 1: 12 steps\nexit codes [0, 0]\n" \
            "steps read back [12.0, 12.0]\n"
    for kind in ("leak", "fixed"):
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o",
                       str(tmp_path / f"{kind}.vtsnap"), "--", sys.executable, HOGWILD, kind])
        assert (rc == 0 or pytorch_ipc_exit_crash(rc, out)) and said(out) == said(plain), \
            f"{kind}: exit {rc}, untraced said {said(plain)}; traced:\n{out[-6000:]}"

        snaps = sorted(tmp_path.glob(f"{kind}-*.vtsnap"))
        assert len(snaps) == 3, (snaps, out[-3000:])   # the parent and its two trainers
        verdicts = []
        for snap in snaps:
            rc, text = run([CLI, "check", str(snap)])
            verdicts.append(rc)
            if rc == 1:
                # the script, __mp_main__ in the child, named as the
                # program's __main__
                assert re.search(r"held by: module __main__\.history → list\[\*\] → tensor "
                                 rf"'h = F\.relu\(self\.fc1\(x\)\) \(hogwild\.py:{line}\)'",
                                 text), text[:3000]
            else:
                assert rc == 0 and "0 findings" in text, text[:3000]
        assert sorted(verdicts) == ([0, 1, 1] if kind == "leak" else [0, 0, 0]), verdicts
        # all three at once, as the run's last line says
        rc, text = run([CLI, "check", *map(str, snaps)])
        assert rc == (1 if kind == "leak" else 0), text[-3000:]
        assert text.count("==> ") == 3, text[-3000:]
        assert (f"3 files: {2 if kind == 'leak' else 0} with findings, "
                f"{1 if kind == 'leak' else 3} clean") in text, text[-3000:]


def test_run_track_judges_cuda_tensors_another_process_sent_and_names_their_holder(tmp_path):
    """actor_learner.py: a spawned actor sends CUDA tensors to the learner
    through a Queue; the learner's leak twin keeps every one. The received
    tensors live in memory the learner's allocator never made (IPC
    mappings: no ALLOC in its trace), which `check` took for host storages
    and never judged (0 findings); now `track()` declares them external on
    their device (vt_pool_block_at), so they are judged and their holder is
    named. The actor itself allocated through PyTorch's observed allocator
    alone: run's listing said its snapshot used no device memory and gave
    -o's name to the learner; both used the device, so both keep their pids."""
    script = os.path.join(HERE, "actor_learner.py")
    for kind in ("leak", "fixed"):
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o",
                       str(tmp_path / f"{kind}.vtsnap"), "--", sys.executable, script, kind])
        said = dict(re.findall(r"snapshot written to (\S+) \((.*)\)", out))
        actor_exit = re.search(r"learner steps 8, actor exit (-?\d+)", out)
        assert (rc == 0 or pytorch_ipc_exit_crash(rc, out)) and actor_exit and (
            actor_exit.group(1) == "0" or pytorch_ipc_child_exit_crash(
                int(actor_exit.group(1)),
                len(said) == 2 and all(w.startswith("exit") for w in said.values()))), \
            out[-3000:]
        assert len(said) == 2 and not any("no device memory" in w for w in said.values()), said
        assert all(re.fullmatch(rf"{kind}-\d+\.vtsnap", os.path.basename(p)) for p in said), said
        actor = next(p for p in said if "spawn_main" in snapshot_json(p)["meta"]["command_line"])
        learner = next(p for p in said if p != actor)
        rc, text = run([CLI, "summary", actor])
        assert rc == 0 and re.search(r"8 MiB\s+8 allocations\s+actor .*actor_learner\.py:\d+",
                                     text), text[:3000]
        rc, text = run([CLI, "check", learner])
        if kind == "fixed":
            assert rc == 0 and "0 findings" in text, text[:3000]
            continue
        assert rc == 1, text[:3000]
        assert re.search(r"\d+ × \[linger\] \d+ MiB .*\n +tensor 'while \(obs := q\.get\(\)\) "
                         r"is not None: \(actor_learner\.py:\d+\)'\n +held by: module "
                         r"__main__\.kept → list\[\*\]", text), text[:3000]
        assert re.search(r"storage 0x[0-9a-f]+ on cuda:0, 1 MiB, external", text), text[:3000]


def test_run_track_names_the_with_block_that_alone_holds_a_stash(tmp_path):
    """with_stash.py: a saved-tensors stash (a pack hook keeping what
    autograd saves) entered with no `as` around the training loop keeps
    every step's activations; only the block holds it, through the bound
    __exit__ it keeps on its frame's value stack, which the collector does
    not see: the chain began at `method __exit__.__self__`, from nowhere.
    It starts at the block now, the fixed twin (a stash a step) is clean,
    and the program prints what it prints untraced."""
    line, got = _traced_twins(tmp_path, "with_stash.py", "# STASH_LINE", "step ", 8)
    _, _, fixed_rc, fixed_text = got["fixed"]
    assert fixed_rc == 0, fixed_text[:3000]
    _, _, rc, text = got["leak"]
    assert rc == 1 and re.search(rf"held by: frame with block in main with_stash\.py:{line} → "
                                 r"method __exit__\.__self__ → Stash\.kept → list\[\*\]",
                                 text), text[:4000]


def test_run_track_names_what_keeps_the_tensors_hooks_piling_up_use_every_step(tmp_path):
    """hooks_pile_up.py: a forward hook registered each step and never
    removed, each with its own step's batch as a default argument; every
    batch is used at every forward by its hook, so none is stale, and the
    model is a local of main(), gone by the snapshot. The growth finding
    named the batch's line and "no holder found"; a walk now starts from the
    lines of what the loop carries more of each step, so the chain names the
    hook's defaults (and, as far as the walks' credit reaches, the layer's
    hook dict, the model and main's local); the fixed twin (the handle
    removed) is clean, and the program prints what it prints untraced."""
    line, got = _traced_twins(tmp_path, "hooks_pile_up.py", "# BATCH_LINE", "step ", 60)
    _, _, fixed_rc, fixed_text = got["fixed"]
    assert fixed_rc == 0, fixed_text[:3000]
    _, _, rc, text = got["leak"]
    assert rc == 1 and "[growth]" in text and f"hooks_pile_up.py:{line}" in text, text[:3000]
    # how far up the chain reaches (a hook's function, the layer's hook dict,
    # the model, main's local) is as far as the walks' credit, a share of
    # the program's time on a shared machine, took it by the last step
    assert re.search(r"held by \(at the last step end judged\):\n\s+(.* → )?"
                     r"function log_ratio\.__defaults__ → tuple\[0\] → tensor 'x = torch\.randn",
                     text), text[:4000]


def test_run_track_walks_a_quiet_validation_after_marked_training(tmp_path):
    """quiet_validation.py: marked training steps, then a validation pass
    with no mark that keeps every batch's graph in a summed loss. Once the
    program had marked, the tracker never ticked again: nothing walked the
    pass, and `check --rules tape` found its activations with "no holder
    found". Now a program whose marks have gone quiet (no mark for four of
    its usual steps, a second at least) is ticked again: the holder is
    named, the fixed twin stays clean, and the program prints what it
    prints untraced."""
    line, got = _traced_twins(tmp_path, "quiet_validation.py", "# VAL_LINE", "val ", 2,
                              "--rules", "tape")
    for kind, (snap, out, rc, text) in got.items():
        if kind == "fixed":
            assert rc == 0, text[:3000]
            continue
        assert rc == 1, text[:3000]
        assert re.search(r"held by: frame local 'val_loss' in validate quiet_validation\.py:"
                         rf"{line} → tensor 'val_loss \+= criterion\(model\(x\), y\) .*"
                         rf"\(quiet_validation\.py:{line}\)'\.grad_fn", text), text[:4000]
        # each finding's own chain, from the frame's local: a walk at a
        # tick starts from 32 stale tensors at most, and the walks' credit
        # is the program's CPU time (less under load), so the pass ends
        # before some are walked (on a quiet machine 30 of 58 findings had
        # a chain; without the quiet stretch's ticks, none)
        rc, text = run([CLI, "check", snap, "--rules", "tape", "--json"])
        findings = json.loads(text)["findings"]
        # (a path of the tensor and its storage alone names no holder)
        chained = [f for f in findings if any(len(p["steps"]) > 2 for p in f["paths"])]
        assert len(findings) >= 40 and len(chained) >= len(findings) // 4, \
            [f["paths"][:1] for f in findings]
        assert all(f["paths"][0]["text"].startswith("frame local 'val_loss' in validate")
                   for f in chained), [f["paths"][:1] for f in chained]
