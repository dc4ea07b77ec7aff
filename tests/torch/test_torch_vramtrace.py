"""The three ways a PyTorch user meets vramtrace, each a real training loop
on the simulated device (train_way.py, leak_cycle.py, each its own torch
process), with the snapshot read back by the `vramtrace` command and its
numbers checked against what PyTorch and the device counted in the same
run. This driver itself never imports torch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

import procs

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
MIB = 1 << 20
HANDLE_WS = 32 * MIB        # each cuBLAS handle's own workspace (sm_90)


def run(cmd: List[str], env: Dict[str, str] | None = None, status: int = 0,
        cwd: Path | None = None) -> str:
    """cmd's output (procs.run's), asserting it exited with `status`."""
    rc, out = procs.run(cmd, env, cwd=cwd)
    assert rc == status, f"{cmd} exited {rc}:\n{out[-4000:]}"
    return out


def run_way(tmp, way: str, *, preload: bool, uncached: bool, mem: str = "1G") -> Dict[str, Any]:
    out, snap = tmp / f"{way}-{preload}.json", tmp / f"{way}-{preload}.vtsnap"
    cmd = [SIMRUN, "--mem", mem, "--"]
    if preload:
        cmd += [CLI, "run", "--"]
    cmd += [sys.executable, os.path.join(HERE, "train_way.py"), way, str(out)]
    if preload or way == "pluggable":
        cmd += ["--snapshot", str(snap)]
    env = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"} if uncached else {}
    run(cmd, env, cwd=tmp)
    with open(out) as f:
        res = json.load(f)
    res["snap"] = str(snap)
    return res


def snapshot_json(snap: str) -> Dict[str, Any]:
    return json.loads(run([CLI, "json", snap]))


def alive(sj: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [lt for lt in sj["lifetimes"] if lt["free_seq"] is None]


def leaks_summary(snap: str):
    """(allocations, text) from `vramtrace leaks`' SUMMARY line."""
    text = run([CLI, "leaks", snap])
    m = re.search(r"SUMMARY: vramtrace: .* alive in (\d+) allocations?", text)
    assert m, text[-2000:]
    return int(m.group(1)), text


def summary_counts(snap: str) -> Dict[str, int]:
    text = run([CLI, "summary", snap])
    m = re.search(r"counts: allocs (\d+), frees (\d+), segment allocs (\d+)", text)
    assert m, text
    return {"allocs": int(m.group(1)), "frees": int(m.group(2)), "segment_allocs": int(m.group(3))}


def test_uncached_run_records_every_tensor_allocation(tmp_path):
    """PYTORCH_NO_CUDA_MEMORY_CACHING=1 vramtrace run -- python train.py"""
    plain = run_way(tmp_path, "uncached", preload=False, uncached=True)
    traced = run_way(tmp_path, "uncached", preload=True, uncached=True)
    # Without vramtrace the device saw one cudaMalloc per tensor (and one
    # driver allocation per cuBLAS handle): the snapshot has every one.
    counts = summary_counts(traced["snap"])
    assert counts["allocs"] == plain["sim_total"]["mem_alloc_calls"] > 500
    assert counts["frees"] == plain["sim_total"]["mem_free_calls"]
    # ... served from vramtrace's cache: the device saw segments only.
    assert traced["sim_total"]["mem_alloc_calls"] < counts["allocs"] // 20
    # What is alive at the snapshot is what the plain run's device held:
    # the parameters, AdamW's moments and the cuBLAS handles' workspaces.
    sj = snapshot_json(traced["snap"])
    live = alive(sj)
    assert sum(lt["req_size"] for lt in live) == plain["sim_bytes_in_use"]
    handles = (plain["sim_bytes_in_use"] - plain["alive_tensor_bytes"]) // HANDLE_WS
    assert handles in (1, 2)
    n, _ = leaks_summary(traced["snap"])
    assert n == len(live) == traced["alive_tensors"] + handles


def test_pluggable_allocator_serves_tensors_from_vramtraces_cache(tmp_path):
    """vramtrace.torch.use_allocator() (CUDAPluggableAllocator)"""
    res = run_way(tmp_path, "pluggable", preload=False, uncached=False)
    vt = res["vramtrace"]
    # vramtrace.stats() agrees with the tensors alive, byte for byte.
    assert vt["requested_bytes"]["all"]["current"] == res["alive_tensor_bytes"]
    assert vt["allocation"]["all"]["current"] == res["alive_tensors"]
    # The device saw vramtrace's segments (plus the cuBLAS handles' own
    # workspaces, which do not go through PyTorch), not one call per tensor.
    handles = (res["sim_bytes_in_use"] - vt["reserved_bytes"]["all"]["current"]) // HANDLE_WS
    assert handles in (1, 2)
    assert res["sim_total"]["mem_alloc_calls"] == vt["num_backend_allocs"] + handles
    assert vt["num_backend_allocs"] < vt["allocation"]["all"]["allocated"] // 20
    # The snapshot works, which PyTorch's own recorder cannot do here.
    assert "not supported" in res["torch_history_error"].lower() or res["torch_history_error"]
    counts = summary_counts(res["snap"])
    assert counts["allocs"] == vt["allocation"]["all"]["allocated"]
    n, _ = leaks_summary(res["snap"])
    assert n == res["alive_tensors"]


def test_native_allocator_is_observed_with_vramtrace_preloaded(tmp_path):
    """vramtrace run -- python train.py, PyTorch's caching allocator left on:
    observed block by block (vramtrace/_autorun.py), never replaced."""
    res = run_way(tmp_path, "native", preload=True, uncached=False)
    plain = run_way(tmp_path, "native", preload=False, uncached=False)
    t, vt = res["torch"], res["vramtrace"]
    # PyTorch counted what it counts without vramtrace
    assert t == plain["torch"], (t, plain["torch"])
    handles = (res["sim_bytes_in_use"] - t["reserved"]) // HANDLE_WS
    assert handles in (1, 2)
    # PyTorch's segments went to the device as without vramtrace: the cache
    # served only the cuBLAS handles' own workspaces
    assert vt["allocation"]["all"]["current"] == handles
    assert vt["requested_bytes"]["all"]["current"] == handles * HANDLE_WS
    assert res["sim_total"]["mem_alloc_calls"] == plain["sim_total"]["mem_alloc_calls"]
    # the snapshot has every tensor PyTorch handed out, and its segments
    counts = summary_counts(res["snap"])
    assert counts["allocs"] == t["allocations"] + handles
    assert counts["segment_allocs"] >= t["segment_allocs"] + 1
    sj = snapshot_json(res["snap"])
    assert sj["meta"]["framework_allocator"] == "observed"
    blocks = [lt for lt in alive(sj) if "outside_pool" not in lt["flags"]]
    assert sum(lt["size"] for lt in blocks) == t["allocated"]


def run_cycle_program(script: str, mem: str, out: Path, snap: Path, kind: str,
                      *extra: str) -> Dict[str, Any]:
    """Runs tests/torch/SCRIPT (leak|fixed OUT SNAPSHOT) uncached under
    `vramtrace run` on a device of MEM: what it wrote in OUT, with "snap"."""
    run([SIMRUN, "--mem", mem, "--", CLI, "run", "--", sys.executable,
         os.path.join(HERE, script), kind, str(out), str(snap), *extra],
        {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, cwd=out.parent)
    with open(out) as f:
        res = json.load(f)
    res["snap"] = str(snap)
    return res


def run_leak(tmp_path, kind: str) -> Dict[str, Any]:
    return run_cycle_program("leak_cycle.py", "96M", tmp_path / f"{kind}.json",
                             tmp_path / f"{kind}.vtsnap", kind, "--steps", "10")


def test_reference_cycle_leak_runs_out_of_memory_and_check_names_the_cycle(tmp_path):
    leak = run_leak(tmp_path, "leak")
    assert leak["oom_at_step"] is not None and 3 <= leak["oom_at_step"] < 10
    assert leak["bytes_per_step"] == [16 * MIB * (i + 1) for i in range(leak["oom_at_step"])]
    # `vramtrace check` exits 1 when it has findings.
    rep = json.loads(run([CLI, "check", leak["snap"], "--json"], status=1))
    flagged = rep["findings"]
    # Every pair made in a step the checker can judge (one complete unused
    # step after it) is flagged, with the cycle that holds it.
    assert len(flagged) >= 2 * (leak["oom_at_step"] - 2)
    for f in flagged:
        path = f["paths"][0]
        assert path["cycle"] and path["text"].startswith("(cycle) Node.other"), path["text"]
        assert path["steps"][-1]["kind"] == "storage" and path["steps"][-1]["bytes"] == 8 * MIB
    text = run([CLI, "check", leak["snap"]], status=1)
    assert "(cycle) Node.other → Node.other → Node.buf" in text


def test_fixed_cycle_runs_flat_and_check_is_clean(tmp_path):
    fixed = run_leak(tmp_path, "fixed")
    assert fixed["oom_at_step"] is None
    assert max(fixed["bytes_per_step"]) == min(fixed["bytes_per_step"])   # flat
    text = run([CLI, "check", fixed["snap"]])
    assert text.startswith("vramtrace check: 0 findings")


def run_gc_cycle(tmp_path, kind: str) -> Dict[str, Any]:
    return run_cycle_program("gc_cycle.py", "256M", tmp_path / f"gc-{kind}.json",
                             tmp_path / f"gc-{kind}.vtsnap", kind)


def test_activations_a_collection_freed_are_held_by_a_reference_cycle_until_gc_ran(tmp_path):
    """Each step's stash sits in a cycle (a callback capturing its context)
    until the collector runs: every one is flagged as held by a reference
    cycle until gc ran, with its bytes and its wait; the weights and Adam's
    state, used every step, are not."""
    leak = run_gc_cycle(tmp_path, "leak")
    rep = json.loads(run([CLI, "check", leak["snap"], "--json"], status=1))
    stashed = sorted(a for a, _ in leak["stashed"])
    assert len(stashed) == 9
    assert sorted(f["addr"] for f in rep["findings"]) == stashed
    assert "cycle" in rep["rules_run"]
    for f in rep["findings"]:
        assert f["rule"] == "cycle" and f["device"] == 0 and f["bytes"] == 512 << 10, f
        gc_at, freed = f["collected_by_gc"], f["freed"]
        assert gc_at["seq"] < freed["seq"] and gc_at["time_ns"] <= freed["time_ns"]
        assert f["linger_ns"] == freed["time_ns"] - f["last_use"]["time_ns"] > 0
        assert "gc_cycle.py:" in f["owner"]["name"] and "stash(" in f["owner"]["name"]
    # a stash that a mark's walk saw before the collection is named by its cycle
    paths = [p["text"] for f in rep["findings"] for p in f["paths"] if p["cycle"]]
    lam = f"function <lambda at gc_cycle.py:{leak['lambda_line']}>"
    assert any(p.startswith(f"(cycle) StepContext.on_done → {lam}") and
               "StepContext.act → tensor" in p for p in paths), paths
    text = run([CLI, "check", leak["snap"], "--top", "0"], status=1)   # each finding detailed
    assert text.startswith("vramtrace check: 9 findings, 4.5 MiB held after last use")
    assert text.count("held by a reference cycle until gc ran: the collection at") == 9
    assert "held by (just before gc collected it):" in text


def test_fixed_callback_without_the_cycle_is_clean(tmp_path):
    fixed = run_gc_cycle(tmp_path, "fixed")
    assert len(fixed["stashed"]) == 9
    text = run([CLI, "check", fixed["snap"]])
    assert text.startswith("vramtrace check: 0 findings"), text[:3000]


OOM_PROGRAM = """
import torch, vramtrace, vramtrace.torch as vtt
vtt.use_allocator()
keep = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
try:
    torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    print("no error")
except RuntimeError as exc:
    print("raised:", exc)
after = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
print("goes on:", after.data_ptr() != 0, "ooms:", vramtrace.stats()["num_ooms"])
"""


def test_use_allocator_out_of_memory_raises_and_the_program_goes_on():
    """A pluggable allocator's NULL would become a tensor at address 0:
    through libvramtrace_torch.so the failed request raises in Python."""
    out = run([SIMRUN, "--mem", "256M", "--", sys.executable, "-c", OOM_PROGRAM])
    assert "raised: CUDA out of memory (vramtrace): tried to allocate 1073741824 bytes" in out, out
    assert "goes on: True ooms: 1" in out, out


def test_a_model_inductor_compiled_runs_as_without_vramtrace_and_its_leak_is_named(tmp_path):
    """torch.compile's default backend on the device: inductor compiles Triton
    kernels and loads them (cuModuleLoad, through libcaffe2_nvrtc, which did
    not load on the simulator before it had modules). Untraced and under
    `vramtrace run --track` the loop prints the same memory_allocated() after
    every step; its leak twin (each step's logits kept, as a nanoGPT user
    keeping them for a figure would) is named through the list: the tensor
    the program keeps was made by inductor's generated code, which no op
    shows, and a walk finds it on the memory the books know (before:
    "held by: (no holder recorded)", as on nanoGPT itself with compile=True),
    named by the program's line that called the compiled model, where the
    allocator handed its memory out (vt_pool_block_stack; before: by the
    compiled function's def, and a row of it kept by 'input, first used by
    "kept.append(...)"')."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    # The two runs compared compile in their own process (one compile
    # thread: inductor's pool of worker processes costs each run about 7 s
    # to start, even on a warm cache); the leak run keeps the pool, whose
    # workers start under `vramtrace run --track` as a user's do.
    one_thread = dict(env, TORCHINDUCTOR_COMPILE_THREADS="1")
    prog = os.path.join(HERE, "compiled_loop.py")
    line = next(i for i, text in enumerate(open(prog), 1) if "# OUT_LINE" in text)
    plain = run([SIMRUN, "--mem", "1G", "--", sys.executable, prog], one_thread)
    steps = [ln for ln in plain.splitlines() if ln.startswith("step ")]
    assert len(steps) == 6, plain[-3000:]
    assert list((tmp_path / "triton").rglob("*.cubin")), "inductor compiled no Triton kernel"
    snap = str(tmp_path / "clean.vtsnap")
    traced = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
                  sys.executable, prog], one_thread)
    assert [ln for ln in traced.splitlines() if ln.startswith("step ")] == steps, traced[-3000:]
    assert run([CLI, "check", snap]).startswith("vramtrace check: 0 findings")
    snap = str(tmp_path / "leak.vtsnap")
    run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", snap, "--",
         sys.executable, prog, "leak"], env)
    text = run([CLI, "check", snap], status=1)
    assert "no holder recorded" not in text, text[:4000]
    # the kept tensor is named by the program's line that called the
    # compiled model, where its memory was allocated (the cause, then each
    # finding's chain): found by a walk where no op of the program used it,
    # first seen as an input where one did (a row of it sliced, as nanoGPT's
    # users keep one: it read 'input, first used by "kept.append(...)"')
    call = "logits, loss = compiled(idx, targets)"
    assert (f"held by: module __main__.kept → list[*] → tensor '{call} "
            f"(compiled_loop.py:{line})'\n") in text, text[:4000]
    assert (f"module __main__.kept → list[0] → tensor '{call} (compiled_loop.py:{line}, "
            "tensor (32, 64, 65) float32, made where no op showed it)'") in text, text[:4000]
    assert (f"(view of '{call} (compiled_loop.py:{line}, made where no op showed it)'") \
        in text, text[:4000]
    # the mm's buffer (empty_strided_cuda, no op) by the op that wrote it as
    # its out=, at the compiled function's line, not as an input "first
    # used by" that op
    fwd = next(i for i, text in enumerate(open(prog), 1) if "def forward(" in text)
    src = "def forward(self, idx: torch.Tensor, targets: torch.Tensor):"
    assert (f"owner: tensor '{src} (compiled_loop.py:{fwd}, aten.mm out[0])'") in text, \
        text[:4000]
    assert "first used by" not in text, text[:4000]



def test_a_tensor_made_before_track_began_is_not_named_as_made_where_no_op_showed_it(tmp_path):
    """made_before_track.py under `vramtrace run`: a CUDA tensor made before
    the program's track() block, used inside it. Its block's allocation has
    a stack the allocator's observer recorded, but from before track()
    began, where an op the tracker never saw made it: it is named by the
    line that first used it (as before track() could name memory by its
    allocation), not 'x = torch.randn(...) (…, made where no op showed it)',
    which only memory handed out since the block began earns (a compiled
    region's output: the inductor test above)."""
    prog = os.path.join(HERE, "made_before_track.py")
    use = next(i for i, text in enumerate(open(prog), 1) if "# USE_LINE" in text)
    snap = str(tmp_path / "inside.vtsnap")
    out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", str(tmp_path / "run.vtsnap"),
               "--", sys.executable, prog, snap])
    assert "done (256, 256)" in out, out[-3000:]
    events = json.loads(run([CLI, "json", snap, "--events"]))["events"]
    names = [e["str"] for e in events if e["kind"] == "TENSOR_NEW"]
    assert names == [f'input, first used by "y = x * 2" (made_before_track.py:{use})',
                     f"y = x * 2 (made_before_track.py:{use}, aten.mul out[0])"], names


def test_a_graph_kept_across_batches_by_a_hand_stepped_loop_grows_at_the_users_line(tmp_path):
    """tbptt_retain.py: truncated BPTT whose hidden state is never detached,
    every backward told to retain the graph, the parameters stepped by hand
    (no optimizer step: no marks). Nothing lingers (every backward uses every
    batch's activations again); the hidden state's line grows. Plain `run`
    flags it there (never freed, in the steps its backward passes end: the
    40 batches' 39 before the last); `run --track` too, in the same steps
    (it was judged by time before: growth by time, which was for an observed
    pool without tensors only, 0 findings before that), with the graph that
    holds it, the cell's nodes folded into one cycle with its count. The
    fixed twin (the hidden state detached each batch) is clean under both."""
    script = os.path.join(HERE, "tbptt_retain.py")
    with open(script) as f:
        line = next(i for i, text in enumerate(f, 1) if "hidden = cell(" in text)
    got = {}
    for variant in ("leak", "fixed"):
        for track in (False, True):
            snap = tmp_path / f"{variant}-{track}.vtsnap"
            run([SIMRUN, "--mem", "1G", "--", CLI, "run"] + (["--track"] if track else []) +
                ["-o", str(snap), "--", sys.executable, script, variant], cwd=tmp_path)
            status = 1 if variant == "leak" else 0   # check exits 1 on findings
            got[variant, track] = (json.loads(run([CLI, "check", "--json", str(snap)],
                                                  status=status)),
                                   run([CLI, "check", str(snap)], status=status))
    for track in (False, True):
        js, text = got["fixed", track]
        assert js["findings"] == [], text
        js, text = got["leak", track]
        # no marks: the backward passes step the trace, with tensors too
        assert (js["marks"], js["steps_inferred"]) == (39, True), text
        # kept to the end: plain run's blocks never freed, step after step
        rules = ("growth",) if track else ("growth", "never-freed")
        flagged = [f for f in js["findings"] if f["rule"] in rules]
        assert flagged, text
        assert any(fr["file"].endswith("tbptt_retain.py") and fr["line"] == line
                   for fr in flagged[0]["alloc"]["stack"]), text
    text = got["leak", True][1]
    assert "held by (at the end):" in text, text
    assert re.search(r"\((\w+Backward0\.next_functions\[\d\] \u2192 ){2}"
                     r"\w+Backward0\.next_functions\[\d\]\) \u00d7\d+", text), text
    assert "SavedTensor 'mat1' of AddmmBackward0" in text, text


def lstm_twins_checked(tmp_path: Path, model: str):
    """tbptt_retain.py's ``model`` (lstm, lstm-train), leak and fixed, 40
    batches each under `run --track`: the fixed twin checked clean; returns
    the line that runs the LSTM and `check --json` of the leak."""
    script = os.path.join(HERE, "tbptt_retain.py")
    with open(script) as f:
        line = next(i for i, text in enumerate(f, 1) if "= rnn(emb(ids), hidden)" in text)
    got = {}
    for variant in ("leak", "fixed"):
        snap = tmp_path / f"{variant}.vtsnap"
        run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--track", "-o", str(snap), "--",
             sys.executable, script, variant, "40", model], cwd=tmp_path)
        got[variant] = json.loads(run([CLI, "check", "--json", str(snap)],
                                      status=1 if variant == "leak" else 0))
    assert got["fixed"]["findings"] == [], got["fixed"]["groups"]
    return line, got["leak"]


def test_word_language_models_lstm_graph_kept_across_batches_is_named_whole(tmp_path):
    """tbptt_retain.py's ``lstm``: word_language_model's own model (an
    embedding, torch's two-layer ``nn.LSTM``, a decoder), its hidden state
    never detached and every backward told to retain the graph. Under `run
    --track` the LSTM's line lingers (its growth is that leak, not a cause of
    its own), held through the graph of thousands of
    ThnnFusedLstmCellBackward0 nodes: every cause through the
    graph reads to the node that saved its tensor (its chain was cut at 1 KiB
    before its nodes were one hop: '(autograd nodes) →
    ThnnFusedLstmCellBackward0.n'), and one names the variable that keeps
    the graph. The fixed twin is clean."""
    line, js = lstm_twins_checked(tmp_path, "lstm")
    assert js["findings"], js["groups"]
    assert all(any(fr["file"].endswith("tbptt_retain.py") and fr["line"] == line
                   for fr in f["alloc"]["stack"]) for f in js["findings"][:50]), js["groups"]
    through = [g["path"] for g in js["groups"] if "(autograd nodes)" in g["path"]]
    assert through, js["groups"]
    assert all("SavedTensor '" in p for p in through), through
    assert any(p.startswith("module __main__.") for p in (g["path"] for g in js["groups"])), \
        js["groups"]


def test_word_language_models_loop_inside_train_names_the_local_that_keeps_the_graph(tmp_path):
    """tbptt_retain.py's ``lstm-train``: the same model with its loop inside
    a function, as word_language_model's train() runs it, so that what
    keeps each batch's graph is a local of the running loop, replaced every
    batch, and the graph is freed when train() returns. Under `run --track`
    the LSTM's tensors linger; their cause is a local of the loop's frames
    whose grad_fn leads to the graph (it was '(autograd nodes) →
    ThnnFusedLstmCellBackward0...': a tick's walk from the stale tensors
    never reached what holds the graph's top tensor, which lives in C++,
    and when they were freed that local had long been replaced). The fixed
    twin is clean."""
    line, js = lstm_twins_checked(tmp_path, "lstm-train")
    lingering = [f for f in js["findings"] if f["rule"] == "linger"]
    assert lingering and all(f["freed"] for f in lingering), js["groups"]
    assert all(any(fr["file"].endswith("tbptt_retain.py") and fr["line"] == line
                   for fr in f["alloc"]["stack"]) for f in lingering[:50]), js["groups"]
    cause = next(g["path"] for g in js["groups"] if g["rule"] == "linger")
    assert re.match(r"frame local '\w+' in (lstm_batch|train) tbptt_retain\.py:\d+ \u2192 "
                    r"(tuple\[[\d*]\] \u2192 )?tensor '[^']*'\.grad_fn \u2192", cause), js["groups"]
