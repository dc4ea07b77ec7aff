"""`vramtrace run -- python train.py` on a program that never imports
vramtrace: PyTorch's own caching allocator is observed, not replaced
(vramtrace/_autorun.py, native/pool_observer.cpp). Each case runs
train_leak.py (a leaking loop and its fixed twin) in its own processes on the
simulated device (a run that several cases only read is made once, by a
module fixture); this driver never imports torch.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from procs import pytorch_exit_abort, run

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
SCRIPT = os.path.join(HERE, "train_leak.py")
LOGITS_LINE = next(i for i, line in enumerate(open(SCRIPT), 1) if "# LOGITS_LINE" in line)


def train(kind: str, snap: str = "", *args: str, env: Dict[str, str] | None = None,
          run_args: Tuple[str, ...] = ()) -> str:
    """train_leak.py KIND ARGS on the device, under `vramtrace run -o SNAP`
    when SNAP is given; its output (stdout and stderr)."""
    cmd = [SIMRUN, "--mem", "1G", "--"]
    if snap:
        cmd += [CLI, "run", *run_args, "-o", snap, "--"]
    cmd += [sys.executable, SCRIPT, kind, *args]
    rc, out = run(cmd, env)
    if not snap and _pytorch_exit_abort(rc, out):
        return out   # the untraced baseline printed everything; PyTorch's teardown aborted
    assert rc == 0, out[-4000:]
    return out


def _pytorch_exit_abort(rc: int, out: str) -> bool:
    """The untraced baseline aborted at exit by PyTorch itself
    (procs.pytorch_exit_abort) after the program printed its last line."""
    lines = out.rstrip().splitlines()
    return pytorch_exit_abort(rc, out) and len(lines) >= 2 and lines[-2].startswith("max_reserved ")


def figures(out: str) -> List[str]:
    """The lines of PyTorch's own figures the script printed."""
    return [line for line in out.splitlines()
            if line.startswith(("step ", "max_allocated ", "max_reserved "))]


def printed(out: str, name: str) -> int:
    m = re.search(rf"^{name} (\d+)$", out, re.M)
    assert m, out[-3000:]
    return int(m.group(1))


def snapshot_json(snap: str) -> dict:
    rc, out = run([CLI, "json", snap])
    assert rc == 0, out[-2000:]
    return json.loads(out)


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory) -> Tuple[str, str]:
    """train_leak.py leak under `vramtrace run`: (its snapshot, its output),
    one torch process read by the tests of what such a run's views say."""
    snap = str(tmp_path_factory.mktemp("leak") / "leak.vtsnap")
    return snap, train("leak", snap)


def test_leak_is_flagged_at_the_scripts_line_and_its_fixed_twin_is_clean(leak_run, tmp_path):
    leak, out = leak_run
    assert "not observed" not in out, out[-3000:]
    rc, text = run([CLI, "check", leak])
    assert rc == 1, text
    # the kept logits, named by the line of the script that made them, found
    # with no mark in the program: the optimizer's steps were marked
    assert f"train_leak.py:{LOGITS_LINE}" in text, text[:4000]
    sj = snapshot_json(leak)
    assert sj["meta"]["framework_allocator"] == "observed"
    assert [m["label"] for m in sj["marks"]][:3] == ["step 1", "step 2", "step 3"], sj["marks"]

    fixed = str(tmp_path / "fixed.vtsnap")
    train("fixed", fixed)
    rc, text = run([CLI, "check", fixed])
    assert rc == 0, text


def test_pytorch_behaves_as_without_vramtrace_and_its_recorder_agrees(tmp_path):
    """memory_allocated()/memory_reserved() step by step, the maxima, and
    PyTorch's own recorder and snapshot inside the run: as without vramtrace;
    vramtrace's allocated curve is PyTorch's memory_allocated()."""
    plain = train("leak", "", "--torch-snapshot", str(tmp_path / "plain.pickle"))
    snap = str(tmp_path / "run.vtsnap")
    traced = train("leak", snap, "--torch-snapshot", str(tmp_path / "run.pickle"))
    assert figures(plain) == figures(traced), (figures(plain), figures(traced))

    with open(tmp_path / "run.pickle", "rb") as f:
        torch_snap = pickle.load(f)
    trace = torch_snap["device_traces"][0]
    # PyTorch's recorder ran next to vramtrace's: it saw every block
    allocs = sum(1 for e in trace if e["action"] == "alloc")
    assert allocs > 10 * 10, allocs

    sj = snapshot_json(snap)
    dev = next(d for d in sj["devices"] if d["ordinal"] == 0)
    assert dev["peak_allocated"] == printed(traced, "max_allocated"), dev
    pool_blocks = [lt for lt in sj["lifetimes"]
                   if "outside_pool" not in lt["flags"] and "alive" in lt["flags"]]
    last_allocated = int(figures(traced)[-3].split()[2])
    assert sum(lt["size"] for lt in pool_blocks) == last_allocated
    # every block PyTorch's recorder saw allocated after the observer attached
    # is one of vramtrace's lifetimes at the same address
    ours = {int(lt["addr"], 16) for lt in sj["lifetimes"] if "outside_pool" not in lt["flags"]}
    theirs = {e["addr"] for e in trace if e["action"] == "alloc"}
    assert theirs <= ours, sorted(theirs - ours)[:5]


def test_a_run_longer_than_the_ring_still_counts_what_pytorch_made_before_it(tmp_path):
    """A ring far smaller than the run (as a day's training overruns the
    default): the events of the model's parameters, the optimizer's state,
    PyTorch's segments and the first steps' kept logits are overwritten.
    The snapshot still lists PyTorch's segments and the blocks alive in
    them (before: only what the window showed: allocated at the end under
    memory_allocated(), reserved under allocated), so the views count
    them, and the first steps' kept logits are there with the stack of the
    script's line."""
    snap = str(tmp_path / "ring.vtsnap")
    out = train("leak", snap, "--steps", "30", run_args=("--conf", "max_events:1500"))
    sj = snapshot_json(snap)
    assert sj["meta"]["events_overwritten"] > 0, sj["meta"]
    last = figures(out)[-3].split()   # step N allocated reserved
    allocated, reserved = int(last[2]), int(last[3])
    pool_blocks = [lt for lt in sj["lifetimes"]
                   if "outside_pool" not in lt["flags"] and "alive" in lt["flags"]]
    assert sum(lt["size"] for lt in pool_blocks) == allocated
    assert any("before_window" in lt["flags"] for lt in pool_blocks), pool_blocks[:3]
    framework = [g for g in sj["segments"] if g["framework"]]
    assert sum(g["size"] for g in framework) == reserved, framework
    dev = next(d for d in sj["devices"] if d["ordinal"] == 0)
    assert dev["final_allocated"] == allocated and dev["final_reserved"] >= reserved, dev
    # every step's logits are kept: the first steps' ALLOCs are gone, their
    # blocks listed from the state with the stack of the script's line
    def made_at_logits_line(sid: int) -> bool:
        while sid:
            sid, f = sj["stacks"][sid]
            fr = sj["frames"][f]
            if fr["file"] == SCRIPT and fr["line"] == LOGITS_LINE:
                return True
        return False
    early = [lt for lt in pool_blocks if "before_window" in lt["flags"]
             and lt["alloc_seq"] is not None and lt["alloc_seq"] < sj["window"]["first_seq"]
             and made_at_logits_line(lt["alloc_stack"])]
    assert len(early) >= 3, [(lt["alloc_seq"], lt["flags"]) for lt in pool_blocks][:20]
    # check judges the line by the window's steps and counts the whole leak:
    # every step's kept logits, those made before the window too
    rc, text = run([CLI, "check", snap, "--json"])
    assert rc == 1, text[-3000:]
    found = [f for f in json.loads(text)["findings"]
             if f["rule"] in ("never-freed", "outlier")]
    assert len(found) == 1, found
    f = found[0]
    assert f["allocations_before_window"] >= 3 and f["allocations"] >= 29, f
    assert f["allocations"] - f["allocations_before_window"] >= 2, f
    assert f["bytes"] >= len(early) * 512 * 256 * 4, f


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


def test_run_names_the_line_of_a_leak_that_ended_before_the_window(tmp_path):
    """train_leak.py early (the first 10 steps' logits kept, 60 steps)
    under plain `vramtrace run`, the user's first command, with a ring of
    2048 events that keeps the last 30-odd steps: the window frees the
    logits line's blocks within their step, and the 10 made before it are
    alive at its end. The outlier rule flags them as the whole recording
    does (before: "0 findings"); the fixed twin under the same ring is
    clean."""
    snap = str(tmp_path / "early.vtsnap")
    train("early", snap, "--steps", "60", run_args=("--conf", "max_events:2048"))
    rc, text = run([CLI, "check", snap, "--json"])
    assert rc == 1, text[-3000:]
    j = json.loads(text)
    assert j["events_overwritten"] > 0, j["events_overwritten"]
    f = next(f for f in j["findings"] if f["rule"] == "outlier")
    assert f["allocations"] == f["allocations_before_window"] == 10, f
    assert f["bytes"] == 10 * 512 * 256 * 4, f
    rc, text = run([CLI, "check", snap])
    assert f"at <module> ({SCRIPT}:{LOGITS_LINE})" in text, text[:3000]
    assert "in 10 allocations (10 made before the window, still alive)" in text, text[:3000]
    snap = str(tmp_path / "fixed.vtsnap")
    train("fixed", snap, "--steps", "60", run_args=("--conf", "max_events:2048"))
    rc, text = run([CLI, "check", snap])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]


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
    workers' keep their pids. Before: every file kept its pid, and
    `vramtrace check run.vtsnap` found no file."""
    script = tmp_path / "loader.py"
    script.write_text(DATALOADER_SCRIPT)
    snap = tmp_path / "run.vtsnap"
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", str(snap), "--",
                   sys.executable, str(script)])
    assert rc == 0 and "done" in out, out[-4000:]
    files = sorted(p.name for p in tmp_path.glob("*.vtsnap"))
    assert "run.vtsnap" in files and len(files) == 3, (files, out[-3000:])
    sj = snapshot_json(str(snap))
    assert sj["meta"]["framework_allocator"] == "observed", sj["meta"]
    assert "loader.py" in sj["meta"]["command_line"], sj["meta"]
    for name in files:
        if name != "run.vtsnap":
            assert re.fullmatch(r"run-\d+\.vtsnap", name), files
            assert "spawn_main" in snapshot_json(str(tmp_path / name))["meta"]["command_line"]


HARD_EXIT_SCRIPT = """
import os, sys, torch
kept = []
for step in range(6):
    kept.append(torch.empty(1 << 18, device="cuda"))
    scratch = torch.empty(1 << 16, device="cuda")
    del scratch
if os.fork() == 0:   # a forked child ending the same way (multiprocessing's workers do)
    os._exit(0)
os.wait()
print("done", flush=True)
os._exit(3)   # the NCCL-hang workaround: no atexit handler, no teardown
"""


def test_run_snapshots_a_program_that_ends_with_os_exit(tmp_path):
    """A script that ends with os._exit() (DDP scripts' way round a hang in
    NCCL's teardown) runs no exit handler: `vramtrace run` wrote no snapshot
    and said only that none was written. Now the exit snapshot is written
    first (its status and output as untraced); a forked child ending so
    writes none, as before."""
    script = tmp_path / "hard_exit.py"
    script.write_text(HARD_EXIT_SCRIPT)
    rc, plain = run([SIMRUN, "--mem", "1G", "--", sys.executable, str(script)])
    assert rc == 3 and plain.strip() == "done", plain[-3000:]
    for track in ([], ["--track"]):
        snap = tmp_path / f"run{len(track)}.vtsnap"
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *track, "-o", str(snap), "--",
                       sys.executable, str(script)])
        assert rc == 3 and "done" in out, out[-3000:]
        assert "no exit snapshot" not in out, out[-3000:]
        assert sorted(p.name for p in tmp_path.glob("*.vtsnap")) == \
            sorted(f"run{k}.vtsnap" for k in range(len(track) + 1)), out[-3000:]
        sj = snapshot_json(str(snap))
        # the kept tensors alive at its end (not freed by a teardown)
        alive = [lt for lt in sj["lifetimes"] if lt.get("free_seq") is None
                 and lt.get("req_size") == 1 << 20]
        assert len(alive) == 6, [(lt.get("req_size"), lt.get("free_seq"))
                                 for lt in sj["lifetimes"]]
        if track:   # track() was left first: the kept tensors' holder walked
            rc, text = run([CLI, "check", str(snap)])
            got = re.search(r"(\d+) tensors, (\d+) holders", text)
            assert got and int(got[1]) >= 12 and int(got[2]) >= 1, text[:3000]


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
    prog = os.path.join(HERE, "kept_eval_graphs.py")
    line = next(i for i, text in enumerate(open(prog), 1) if "# EVAL_LINE" in text)
    rc, plain = run([SIMRUN, "--mem", "1G", "--", sys.executable, prog, "leak"])
    plain_evals = [ln for ln in plain.splitlines() if ln.startswith("eval ")]
    assert rc == 0 and len(plain_evals) == 10, plain[-3000:]
    for kind in ("leak", "fixed"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                       sys.executable, prog, kind])
        assert rc == 0 and "holder walk at the snapshot" not in out, out[-3000:]
        rc, text = run([CLI, "check", snap])
        if kind == "fixed":
            assert rc == 0, text
            continue
        assert [ln for ln in out.splitlines() if ln.startswith("eval ")] == plain_evals
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
        assert re.search(r"held by: module __main__\.state_dict → OrderedDict\['[a-z]+\.weight'\] "
                         r"→ tensor " + made, text), text[:4000]
        # made by the load (its rebuild's set_ gives an empty tensor the
        # loaded memory), not "input, first used by" it
        assert re.search(rf"owner: tensor '[^']*torch\.load\([^']*\(ckpt_sample\.py:{line}, "
                         r"aten\.set_ out\[0\]\)'", text), text[:4000]
        assert "first used by" not in text, text[:4000]


TRAINER = os.path.join(HERE, "trainer_leak.py")
LOSS_LINE = next(i for i, line in enumerate(open(TRAINER), 1) if "# LOSS_LINE" in line)


def trainer(kind: str, snap: str, run_args: Tuple[str, ...] = ()) -> str:
    """trainer_leak.py KIND under `vramtrace run -o SNAP`, with vramtrace's
    own RuntimeWarnings (if it issued any) made errors, as `-W error` does."""
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *run_args, "-o", snap, "--",
                   sys.executable, "-W", "error::RuntimeWarning", TRAINER, kind])
    assert rc == 0 and "kept 12" in out, out[-4000:]
    return out


@pytest.fixture(scope="module")
def trainer_leak(tmp_path_factory) -> str:
    """The snapshot of trainer_leak.py leak under `vramtrace run` (untracked),
    one torch process read by the tests of check and of leaks."""
    snap = str(tmp_path_factory.mktemp("trainer") / "leak.vtsnap")
    trainer("leak", snap)
    return snap


def test_what_the_program_held_at_its_end_counts_though_exit_frees_it(trainer_leak, tmp_path):
    """A trainer and its logger refer to each other (minGPT's and
    Lightning's shape): the losses the logger kept are freed by the
    interpreter's last collection at exit. The snapshot is the program's end,
    before that teardown: the kept losses are alive in it and flagged (as a
    minor cause by default: 44 B)."""
    # The kept losses are 4 B each: by default a minor cause (under 0.1 % of
    # the peak), said in one line; what counts as held at the end is asked
    # with every finding counted (--min-bytes 0).
    leak = trainer_leak
    rc, text = run([CLI, "check", leak])
    assert rc == 0 and re.search(r"1 minor finding \(44 B from 1 cause\).*\n.*"
                                 rf"trainer_leak\.py:{LOSS_LINE}\)", text), text[:4000]
    rc, text = run([CLI, "check", "--min-bytes", "0", leak])
    assert rc == 1, text
    assert f"trainer_leak.py:{LOSS_LINE}" in text, text[:4000]
    assert "in 11 allocations" in text, text[:4000]
    fixed = str(tmp_path / "fixed.vtsnap")
    trainer("fixed", fixed)
    rc, text = run([CLI, "check", "--min-bytes", "0", fixed])
    assert rc == 0, text

    tracked = str(tmp_path / "track.vtsnap")
    trainer("leak", tracked, ("--track",))
    rc, text = run([CLI, "check", "--min-bytes", "0", tracked])
    assert rc == 1, text
    assert re.search(r"held by: \(cycle\) .*LossLog\.history → list\[\*\] → tensor "
                     rf"'self\.loss = .*\(trainer_leak\.py:{LOSS_LINE}\)'", text), text[:4000]


def test_leaks_leads_with_the_programs_lines_and_lists_library_workspaces_last(trainer_leak):
    snap = trainer_leak
    rc, text = run([CLI, "leaks", snap])
    assert rc == 0, text
    header = "The libraries' own handles and workspaces (cuBLAS, cuDNN, NCCL)"
    assert header in text, text[-3000:]
    program, libraries = text.split(header)
    groups = program.split("Leak of ")[1:]
    assert groups and all("cublas" not in g.lower() and "Workspace" not in g for g in groups)
    # the kept losses, led by the program's lines, innermost first: no
    # native frame before them (they are counted, --all-frames shows them)
    kept = [g for g in groups if f"trainer_leak.py:{LOSS_LINE}" in g]
    assert len(kept) == 1 and kept[0].startswith("6 KiB in 12 allocations"), groups
    lines = kept[0].splitlines()
    assert re.match(rf"\s+#\d+ run .*trainer_leak\.py:{LOSS_LINE} ", lines[1]), kept[0]
    assert " 0x" not in kept[0] and "native frames under them hidden" in kept[0], kept[0]
    assert all(g.splitlines()[1].strip().startswith("the library's: ")
               for g in libraries.split("Leak of ")[1:]), libraries
    rc, every = run([CLI, "leaks", "--all-frames", snap])
    assert " 0x" in every and "native frames under them hidden" not in every

    # summary: cuBLAS's workspace, first needed at the program's first matmul, is
    # said to be the library's, a site apart from that line's own tensors
    model_line = next(i for i, text in enumerate(open(TRAINER), 1) if "self.model(x)" in text)
    rc, summary = run([CLI, "summary", snap])
    sites = summary[summary.index("top call sites"):]
    assert re.search(rf"trainer_leak\.py:{model_line} .*\[a library's own: ", sites), sites
    assert re.search(rf"KiB .*trainer_leak\.py:{model_line} \(def at line \d+\)\n", sites), sites

    rc, top = run([CLI, "leaks", "--top", "1", snap])
    assert rc == 0 and top.count("Leak of ") == 2, top      # one of each part
    assert "not listed: --top 0 lists all)" in top, top
    assert run([CLI, "leaks", "--top", "x", snap])[0] == 2


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


def test_the_programs_own_marks_win_over_the_optimizer_steps(tmp_path):
    snap = str(tmp_path / "marks.vtsnap")
    train("fixed", snap, "--steps", "4", "--marks")
    labels = [m["label"] for m in snapshot_json(snap)["marks"]]
    assert labels == [f"epoch 0 batch {i}" for i in range(4)], labels


def test_a_run_whose_observer_cannot_be_built_says_so_everywhere(tmp_path):
    """No compiler: the run says why and what to do, and every view says
    that its findings cover PyTorch's segments only: never a bare all-clear."""
    snap = str(tmp_path / "blind.vtsnap")
    out = train("leak", snap, env={"CXX": "/bin/false",
                                   "VRAMTRACE_CACHE_DIR": str(tmp_path / "cache")})
    tail = out[out.rfind("step 9 "):]
    assert re.search(r"vramtrace run: PyTorch's CUDA allocator is not observed: its observer "
                     r"could not be built .*Fix: install a C\+\+ compiler", tail), tail
    # PyTorch itself ran as ever
    assert figures(out) == figures(train("leak"))
    note = "NOTE: PyTorch's caching allocator ran unobserved in this process"
    for view in ("check", "summary", "leaks"):
        rc, text = run([CLI, view, snap])
        assert note in text, (view, text[:3000])
    assert snapshot_json(snap)["meta"]["framework_allocator"] == "unseen"


def test_two_devices_a_thread_dataloader_workers_and_empty_cache_as_without_vramtrace(tmp_path):
    """torch_surface.py: PyTorch's figures after each part are the same with
    and without `vramtrace run`, and the snapshot has every block of both
    devices, the thread's included, and the segments empty_cache() released."""
    surface = os.path.join(HERE, "torch_surface.py")
    cmd = [SIMRUN, "--devices", "2", "--mem", "1G", "--"]
    rc, plain = run(cmd + [sys.executable, surface])
    assert rc == 0, plain[-3000:]
    snap = str(tmp_path / "surface.vtsnap")
    rc, traced = run(cmd + [CLI, "run", "-o", snap, "--", sys.executable, surface])
    assert rc == 0, traced[-3000:]
    ours = [line for line in traced.splitlines() if not line.startswith("vramtrace")]
    theirs = [line for line in plain.splitlines() if not line.startswith("vramtrace")]
    assert ours == theirs, (ours, theirs)
    last = {}
    for line in theirs:
        f = line.split()
        if f[0] == "empty_cache":   # device allocated reserved max allocations segs segs_freed
            last[int(f[1])] = [int(v) for v in f[2:]]
    assert sorted(last) == [0, 1], theirs
    sj = snapshot_json(snap)
    for dev, (_alloc, _res, max_alloc, allocations, _segs, segs_freed) in last.items():
        info = next(d for d in sj["devices"] if d["ordinal"] == dev)
        assert info["peak_allocated"] == max_alloc, (dev, info)
        blocks = [lt for lt in sj["lifetimes"]
                  if lt["device"] == dev and "outside_pool" not in lt["flags"]]
        assert len(blocks) == allocations, (dev, len(blocks), allocations)
        assert segs_freed == 1
    rc, text = run([CLI, "summary", snap])
    assert re.search(r"segment frees ([2-9]|\d\d)", text), text[:2000]


def test_every_rank_of_a_torchrun_job_is_observed(tmp_path):
    """`vramtrace run -- torchrun ...`: the launcher starts the ranks with the
    bootstrap on PYTHONPATH; each rank's snapshot holds its own blocks and
    optimizer steps."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    rc, out = run([SIMRUN, "--devices", "2", "--mem", "1G", "--", CLI, "run", "-o",
                   str(tmp_path / "rank%r.vtsnap"), "--", torchrun, "--standalone",
                   "--nproc_per_node", "2", os.path.join(HERE, "ranks.py")])
    assert rc == 0, out[-3000:]
    allocated = {int(m.group(1)): int(m.group(2))
                 for m in re.finditer(r"rank (\d) of 2 pid \d+ total \S+ allocated (\d+)", out)}
    assert sorted(allocated) == [0, 1], out[-3000:]
    # each rank's snapshot under its own name: the pattern made them unique
    snaps = sorted(tmp_path.glob("rank*.vtsnap"))
    assert [p.name for p in snaps] == ["rank0.vtsnap", "rank1.vtsnap"], out[-3000:]
    for snap in snaps:
        sj = snapshot_json(str(snap))
        rank = sj["meta"]["rank"]
        assert sj["meta"]["framework_allocator"] == "observed", snap
        assert [m["label"] for m in sj["marks"]] == ["step 1", "step 2", "step 3"]
        dev = next(d for d in sj["devices"] if d["ordinal"] == rank)
        assert dev["peak_allocated"] >= allocated[rank] > 0


def test_one_signal_to_the_launcher_dumps_every_rank_once(tmp_path):
    """`vramtrace run --conf signal:SIGUSR2 -- torchrun --nproc_per_node 4`:
    one SIGUSR2 to torchrun (which passes nothing on itself) reaches every
    rank, each writes exactly one signal snapshot, readable, and run lists
    each with its rank; torchrun itself, which recorded nothing, writes none."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [SIMRUN, "--mem", "1G", "--", CLI, "run", "--conf", "signal:SIGUSR2", "-o",
           str(tmp_path / "rank%r.vtsnap"), "--", torchrun, "--standalone",
           "--nproc_per_node", "4", os.path.join(HERE, "ranks_hold.py"), str(tmp_path)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 240
        ready = [tmp_path / f"ready-{r}" for r in range(4)]
        while not all(f.exists() for f in ready):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0][-3000:]
            time.sleep(0.05)
        ranks = {int(f.read_text()): r for r, f in enumerate(ready)}
        # torchrun: the child of `vramtrace run`, the parent of every rank
        with open(f"/proc/{next(iter(ranks))}/stat") as f:
            launcher = int(f.read().rpartition(")")[2].split()[1])
        os.kill(launcher, signal.SIGUSR2)

        def signal_snaps() -> List[Path]:
            return sorted(q for q in tmp_path.glob("*.vtsnap") if "-signal-" in q.name)
        while len(signal_snaps()) < 4:          # one per rank
            assert time.monotonic() < deadline, [q.name for q in signal_snaps()]
            time.sleep(0.05)
        time.sleep(0.5)                         # a second snapshot would show by now
        (tmp_path / "release").touch()
        out = p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, out[-3000:]
    by_pid: Dict[int, List[Path]] = {}
    for snap in signal_snaps():
        sj = snapshot_json(str(snap))
        by_pid.setdefault(sj["meta"]["pid"], []).append(snap)
        rc, text = run([CLI, "summary", str(snap)])
        assert rc == 0, text[-2000:]
    # the launcher recorded nothing: it passes the signal on and writes none
    assert sorted(by_pid) == sorted(ranks), (by_pid, ranks, launcher)
    assert "vramtrace: signal 12 passed on to 4 other processes of the run" in out, out[-3000:]
    assert all(len(v) == 1 for v in by_pid.values()), by_pid
    for pid, rank in ranks.items():
        sj = snapshot_json(str(by_pid[pid][0]))
        assert sj["meta"]["rank"] == rank
        # the rank's own tensors, alive when it was signalled
        alive = [lt for lt in sj["lifetimes"] if "alive" in lt["flags"]]
        assert sum(lt["size"] >= 256 * 256 * 4 for lt in alive) >= 3, by_pid[pid]
        assert f"{by_pid[pid][0]} (signal, rank {rank}, pid {pid})" in out, out[-3000:]


def test_no_output_of_a_pytorch_run_has_a_mangled_cpp_name(leak_run, tmp_path):
    """C++ frames read demangled in every view: summary, leaks, check, json,
    the HTML page and the Perfetto and PyTorch exports."""
    snap = leak_run[0]
    outputs = {}
    for view in (["summary"], ["leaks", "--all-frames"], ["check"], ["check", "--json"],
                 ["json"]):
        rc, outputs[" ".join(view)] = run([CLI, *view, snap])
        assert rc in (0, 1), outputs[" ".join(view)][-2000:]
    for fmt, ext in (("perfetto", "json"), ("torch", "pickle")):
        out = tmp_path / f"names.{ext}"
        rc, text = run([CLI, "export", "--format", fmt, snap, "-o", str(out)])
        assert rc == 0, text
        outputs[fmt] = out.read_bytes().decode("latin-1")
    page = tmp_path / "names.html"
    rc, text = run([CLI, "viz", "-o", str(page), snap])
    assert rc == 0, text
    outputs["html"] = page.read_text()
    # native frames are there (torch's own, demangled) ...
    assert "c10::cuda::CUDACachingAllocator" in outputs["json"] or "at::" in outputs["json"]
    for name, text in outputs.items():
        assert not re.search(r"\b_Z[NLS]?\d", text), (name, re.findall(r"_Z\w{0,40}", text)[:3])


def test_expandable_segments_and_a_cuda_graphs_pool_as_without_vramtrace(tmp_path):
    """torch_pools.py: with expandable_segments:True (mapped chunks) and with
    a CUDA graph's private pool, PyTorch's figures are the same with and
    without `vramtrace run`, and vramtrace's allocated curve is theirs."""
    pools = os.path.join(HERE, "torch_pools.py")
    for part, env in (("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                      ("graph", {})):
        cmd = [SIMRUN, "--mem", "1G", "--"]
        rc, plain = run(cmd + [sys.executable, pools, part], env)
        assert rc == 0, plain[-3000:]
        snap = str(tmp_path / f"{part}.vtsnap")
        rc, traced = run(cmd + [CLI, "run", "-o", snap, "--", sys.executable, pools, part], env)
        assert rc == 0, traced[-3000:]
        ours = [line for line in traced.splitlines() if not line.startswith("vramtrace")]
        theirs = [line for line in plain.splitlines() if not line.startswith("vramtrace")]
        assert ours == theirs, (part, ours, theirs)
        last = [int(v) for v in theirs[-1].split()[1:]]    # allocated reserved max max_res
        sj = snapshot_json(snap)
        assert sj["meta"]["framework_allocator"] == "observed"
        dev = next(d for d in sj["devices"] if d["ordinal"] == 0)
        assert dev["peak_allocated"] == last[2], (part, dev, last)
        assert dev["final_allocated"] == last[0], (part, dev, last)
        # PyTorch's reserved bytes are among vramtrace's (which adds the
        # device allocations of cuBLAS's own)
        assert dev["final_reserved"] >= last[1], (part, dev, last)


def test_the_bootstrap_leaves_a_python_program_as_it_was(tmp_path):
    """vramtrace run puts its bootstrap first on PYTHONPATH as sitecustomize:
    the program's own sitecustomize still runs, sys.path is the program's,
    and a program without torch imports nothing of it."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import os, sys\n"
        "print('own', os.environ.get('OWN_SITE'))\n"
        "print('boot', any(p.rstrip('/').endswith('vramtrace/_boot') for p in sys.path))\n"
        "print('torch', 'torch' in sys.modules)\n")
    env = {"PYTHONPATH": str(own)}
    rc, plain = run([sys.executable, str(prog)], env)
    assert rc == 0, plain
    rc, traced = run([CLI, "run", "--", sys.executable, str(prog)], env)
    assert rc == 0, traced
    lines = [line for line in traced.splitlines() if not line.startswith("vramtrace")]
    assert lines == plain.splitlines() == ["own ran", "boot False", "torch False"], lines


def test_a_program_that_replaces_pytorchs_allocator_is_not_called_unobserved(tmp_path):
    """With another allocator than PyTorch's caching one (here vramtrace's own,
    use_allocator()) there is no cache to observe: each tensor is an
    allocation recorded as such, and no run says otherwise."""
    prog = tmp_path / "plug.py"
    prog.write_text("import vramtrace.torch as vtt\nvtt.use_allocator()\nimport torch\n"
                    "x = torch.ones(1 << 20, device='cuda')\ny = x * 2\nprint('ok')\n")
    snap = str(tmp_path / "plug.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", snap, "--",
                   sys.executable, str(prog)])
    assert rc == 0 and "ok" in out, out[-3000:]
    assert "not observed" not in out, out[-3000:]
    sj = snapshot_json(snap)
    assert sj["meta"]["framework_allocator"] == "none"
    sizes = [lt["size"] for lt in sj["lifetimes"]]
    assert sizes.count(4 << 20) >= 2, sizes        # x and y, each a tensor of its own
    rc, text = run([CLI, "summary", snap])
    assert "NOTE" not in text, text[:2000]


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


def test_a_library_installed_with_pip_target_is_not_taken_for_the_programs_code(tmp_path):
    """A library put outside site-packages (`pip install --target libs`, the
    folder on PYTHONPATH) makes the tensors the program keeps: the finding
    leads with the program's line that called it, the library's line inside
    it, as for a library in site-packages. The recorder tells the library by
    the *.dist-info an installer leaves beside it (its RECORD lists the
    package). Before: the library's line led, the path rule taking it for the
    program's."""
    libs, proj = tmp_path / "libs", tmp_path / "proj"
    (libs / "fancylib").mkdir(parents=True)
    (libs / "fancylib-1.0.dist-info").mkdir()
    proj.mkdir()
    (libs / "fancylib" / "__init__.py").write_text(
        "import torch\n"
        "\n"
        "class Cache:\n"
        "    def __init__(self):\n"
        "        self.kept = []\n"
        "\n"
        "    def remember(self, x):\n"
        "        y = torch.relu(x) * 2\n"
        "        self.kept.append(y)\n"
        "        return y\n")
    (libs / "fancylib-1.0.dist-info" / "RECORD").write_text(
        "fancylib/__init__.py,sha256=x,1\nfancylib-1.0.dist-info/RECORD,,\n")
    (proj / "train.py").write_text(
        "import torch, fancylib\n"
        "cache = fancylib.Cache()\n"
        "model = torch.nn.Linear(256, 256).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(12):\n"
        "    x = torch.randn(512, 256, device='cuda')\n"
        "    out = cache.remember(model(x))\n"
        "    out.sum().backward()\n"
        "    opt.step(); opt.zero_grad()\n")
    snap = str(tmp_path / "a.vtsnap")
    pythonpath = os.pathsep.join(p for p in (str(libs), os.environ.get("PYTHONPATH", "")) if p)
    p = subprocess.run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", snap, "--",
                        sys.executable, "train.py"], cwd=proj, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": pythonpath})
    assert p.returncode == 0, p.stdout[-3000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 1, text[:4000]
    assert "[never-freed]" in text, text[:4000]
    lib_file = str(libs / "fancylib" / "__init__.py")
    assert re.search(r"allocated: .*\n     at <module> \(.*train\.py:7\)\n"
                     rf"     \(inside it: remember \({re.escape(lib_file)}:8\)\)", text), \
        text[:4000]
    # `vramtrace json` says which frames the reports take for the program's
    own = {(os.path.basename(f["file"]), f["user_code"]) for f in snapshot_json(snap)["frames"]
           if f["module"] == "python" and f["file"].startswith(str(tmp_path))}
    assert own == {("__init__.py", False), ("train.py", True)}, own


KEPT_RESULTS = os.path.join(HERE, "kept_results.py")
KEPT_LOGITS_LINE = next(i for i, line in enumerate(open(KEPT_RESULTS), 1)
                        if "# LOGITS_LINE" in line)
LOSS_LINE_KEPT = next(i for i, line in enumerate(open(KEPT_RESULTS), 1) if "# LOSS_LINE" in line)


@pytest.mark.parametrize("track", [False, True], ids=["run", "run-track"])
def test_results_kept_on_purpose_are_minor_and_a_kept_graph_is_not(track, tmp_path):
    """An unmodified loop keeps each step's detached loss and accuracy (a few
    bytes a step, on purpose): `check` passes, saying in one line that those
    causes are minor (under 0.1 % of the peak), and `--min-bytes 0` still
    counts them. Its twin keeps the losses with their graphs: `check` fails
    at the model's line (under --track, held by the list). Before: the fixed twin failed on both paths
    ("2 findings, 232 B": growth 4 B a step)."""
    reports = {}
    for kind in ("fixed", "leak"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *(["--track"] if track else []),
                       "-o", snap, "--", sys.executable, KEPT_RESULTS, kind])
        assert rc == 0 and "steps 30, mean loss" in out, out[-3000:]
        reports[kind] = (snap, run([CLI, "check", snap]))
    snap, (rc, text) = reports["fixed"]
    assert rc == 0, text[:4000]
    assert "vramtrace check: 0 findings" in text, text[:4000]
    minor = re.search(r"(\d+) minor findings? \(.* from (\d+) causes?\) under the floor of ", text)
    assert minor and "(--min-bytes 0 counts them)" in text, text[:4000]
    # the losses' cause: where they were made (the loss's line)
    assert f"kept_results.py:{LOSS_LINE_KEPT}" in text.split("\n", 4)[4], text[:4000]
    if track:   # and under --track, what keeps a minor cause's tensors, in a line of its own
        assert re.search(r"\n    \[linger\] \d+ B: tensor 'accs\.append\(.*\)'\n"
                         r"      held by: frame local 'accs' in main kept_results\.py:\d+ "
                         r"→ list\[\*\]\n", text), text[:4000]
    rc, strict = run([CLI, "check", "--min-bytes", "0", snap])
    assert rc == 1 and "minor" not in strict.split("\n#1 ")[0], strict[:4000]
    rep = json.loads(run([CLI, "check", "--json", snap])[1])
    assert rep["findings"] == [] and len(rep["minor"]) == int(minor.group(1)), rep["minor"][:2]
    assert 0 < rep["minor_bytes"] < rep["min_bytes"] <= 1 << 20, rep["min_bytes"]
    # the leak: the graphs' activations, made by the model's line, counted
    _, (rc, text) = reports["leak"]
    assert rc == 1, text[:4000]
    assert f"kept_results.py:{KEPT_LOGITS_LINE}" in text, text[:4000]
    if track:
        assert re.search(r"held by: frame local 'losses' in main kept_results\.py:\d+ → list\[\*\] "
                         r"→ tensor 'loss = ", text), text[:4000]


EVAL_KEEP = os.path.join(HERE, "eval_keep.py")
EVAL_MODEL_LINE = next(i for i, line in enumerate(open(EVAL_KEEP), 1) if "# MODEL_LINE" in line)


def test_an_evaluation_without_marks_is_judged_by_time_under_plain_run(tmp_path):
    """`vramtrace run -- python eval.py` (no optimizer step, so no mark; no
    --track): the blocks a loop keeps are judged by time, by the script's
    line: never-freed for what the script holds to its end, growth (in
    windows of the trace) for what its evaluation function kept until it
    returned. Before: "0 findings" and exit 0, with a note that the rules
    needing steps did not run. The fixed twin (torch.no_grad(), predictions
    on the host) is clean."""
    texts = {}
    for kind in ("leak", "leak-in-function", "fixed"):
        (tmp_path / kind).mkdir()
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--", sys.executable,
                       EVAL_KEEP, kind], cwd=tmp_path / kind)
        assert rc == 0 and "preds (1920, 1000)" in out, out[-3000:]
        snap = re.search(r"snapshot written to (\S+) ", out).group(1)
        assert os.path.dirname(snap) == str(tmp_path / kind), out[-2000:]
        texts[kind] = run([CLI, "check", snap])
    site = f"({EVAL_KEEP}:{EVAL_MODEL_LINE},"
    for kind, rule in (("leak", "never-freed"), ("leak-in-function", "growth")):
        rc, text = texts[kind]
        assert rc == 1 and "rules: never-freed,growth;" in text, text[:4000]
        assert "outlier judges step by step: not run" in text, text[:4000]
        assert re.search(rf"#1 \[{rule}\] .*\n(.*\n)*?.*allocated: .*\n\s+at evaluate "
                         + re.escape(site), text), (kind, text[:4000])
    # the model's line makes two call sites (linear, GELU): one cause
    assert ("call sites growing through the run, allocated at evaluate "
            f"({EVAL_KEEP}:{EVAL_MODEL_LINE})") in texts["leak-in-function"][1], \
        texts["leak-in-function"][1][:4000]
    rc, text = texts["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


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


@pytest.mark.parametrize("conf", ["", "max_split_size_mb:20", "roundup_power2_divisions:4"])
def test_blocks_handed_out_whole_count_as_memory_allocated_counts_them(tmp_path, conf):
    # A large block PyTorch does not split (1 MiB or less would be left; with
    # max_split_size, any request of that size or more) counts whole in
    # memory_allocated(); the trace entry gives only the request, and the
    # observer finds the free block it came from (pool_observer.cpp), and
    # rounds a request as PyTorch does (roundup_power2_divisions too): after
    # the steps, the blocks alive in vramtrace's timeline add up to
    # memory_allocated(), and the peaks agree.
    script = os.path.join(HERE, "whole_blocks.py")
    snap = str(tmp_path / "whole.vtsnap")
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else None
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", snap, "--",
                   sys.executable, script], env)
    assert rc == 0, out[-3000:]
    steps = re.findall(r"^allocated (.+) (\d+)$", out, re.M)
    assert [s for s, _ in steps][:3] == ["a", "b", "a freed"], out[-2000:]
    sj = snapshot_json(snap)
    dev = next(d for d in sj["devices"] if d["ordinal"] == 0)
    assert dev["peak_allocated"] == printed(out, "max_allocated"), (dev, out[-1500:])
    sizes = {int(lt["addr"], 16): lt["size"] for lt in sj["lifetimes"]
             if "outside_pool" not in lt["flags"] and "alive" in lt["flags"]}
    assert sum(sizes.values()) == int(steps[-1][1]), (sizes, steps)
    # c whole: 20 MiB; b split: 4; e whole: 13; g whole: 3; i split off
    # h's 40 MiB: 25, or whole where max_split_size keeps it from splitting;
    # in 4 steps between powers of two, e is 14 MiB (its own segment, b's
    # 13 MiB too small), g 2.5 (split off d's 3 and the 13 after it), i 28
    large = sorted(s for s in sizes.values() if s > 1 << 20)
    want = {"": [20, 4, 13, 3, 25], "max_split_size_mb:20": [20, 4, 13, 3, 40],
            "roundup_power2_divisions:4": [20, 4, 14, 2.5, 28]}[conf]
    assert large == sorted(int(w * (1 << 20)) for w in want), large
