"""`vramtrace oom` on real PyTorch programs that run out of memory on the
simulated device (oom_prog.py), recorded by `vramtrace run` (PyTorch's
allocator observed) or by PyTorch's own recorder (a snapshot pickle). The
fixes it offers are the ones its replay verified; the one that is a
setting is applied to the program again, which then fits. This driver never
imports torch.
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import procs
import pytest
import vramtrace

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
PROG = os.path.join(HERE, "oom_prog.py")
MEM = "256M"
MIB = 1 << 20


def run(cmd: List[str], env: Dict[str, str] | None = None) -> Tuple[int, str, str]:
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def prog(mode: str, snap: str = "", *args: str, run_args: Tuple[str, ...] = (),
         env: Dict[str, str] | None = None, mem: str = MEM) -> Tuple[int, str, str]:
    cmd = [SIMRUN, "--mem", mem, "--"]
    if snap:
        cmd += [CLI, "run", *run_args, "-o", snap, "--"]
    return run(cmd + [sys.executable, PROG, mode, *args], env)


def recorded_oom(tmp_path, mode: str, *run_args: str) -> Tuple[str, str]:
    """oom_prog.py MODE under `vramtrace run RUN_ARGS -o TMP_PATH/MODE.vtsnap`,
    which must end in PyTorch's OutOfMemoryError (exit 1): the snapshot's
    path and the program's stderr (run's end included)."""
    snap = str(tmp_path / f"{mode}.vtsnap")
    rc, _, err = prog(mode, snap, run_args=run_args)
    assert rc == 1 and "OutOfMemoryError" in err, err[-3000:]
    return snap, err


def oom_json(path: str) -> dict:
    rc, out, err = run([CLI, "oom", path, "--json"])
    assert rc == 0, err
    return json.loads(out)


def line_in(path: str, code: str, after: int = 0) -> int:
    """The number of the first line of ``path`` after line ``after`` that
    reads ``code`` (stripped of indentation and comment)."""
    with open(path) as f:
        return next(i for i, text in enumerate(f, 1)
                    if i > after and text.split("#")[0].strip() == code)


def verified(j: dict) -> List[str]:
    return [f["kind"] if f["kind"] != "setting" else f["conf"] for f in j["fixes"] if f["verified"]]


def test_fragmentation_fits_with_expandable_segments_and_the_rerun_fits(tmp_path):
    snap, err = recorded_oom(tmp_path, "frag")
    # run's end: the short form, naming the checked fix
    assert "the program ran out of device memory: 12 MiB asked" in err, err[-3000:]
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in err, err[-3000:]
    # the blocks it keeps are no leak: nothing piled up step after step
    assert "piled up" not in err, err[-3000:]
    j = oom_json(snap)
    assert j["allocator"] == "pytorch" and j["request"]["size"] == 12 << 20, j["request"]
    assert "oom_prog.py:" in j["request"]["line"], j["request"]
    d = j["device"]
    # every 20 MiB segment pinned by one 5 MiB block: 150 MiB free in pieces under 12 MiB
    assert d["cache_free"] == d["free_in_smaller_pieces"] == 150 << 20, d
    # the device's total, from the observer's OOM: nothing else held memory
    assert d["capacity"] == d["total"] == 256 << 20 and j["outside"]["other"] == 0, (d, j["outside"])
    assert j["replay"]["reproduced"], j["replay"]
    # the setting that fits, and only that one (and a bigger device)
    assert verified(j) == ["expandable_segments:True", "device"], j["fixes"]
    text = run([CLI, "oom", snap])[1]
    assert len(text.splitlines()) <= 40, text
    # applied to the program: it fits
    rc, out, err = prog("frag", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert rc == 0 and "done" in out, err[-3000:]

    # PyTorch's own snapshot of the same OOM: the same verdict
    pickle_path = str(tmp_path / "frag.pickle")
    rc, out, err = prog("frag", "", "--torch-snapshot", pickle_path)
    assert rc == 1 and os.path.exists(pickle_path), err[-3000:]
    pj = oom_json(pickle_path)
    assert pj["allocator"] == "pytorch" and pj["device"]["cache_free"] == 150 << 20, pj["device"]
    assert "oom_prog.py:" in pj["request"]["line"], pj["request"]
    assert verified(pj) == ["expandable_segments:True", "device"], pj["fixes"]


def test_a_kept_list_fits_only_when_the_flagged_storages_are_freed(tmp_path):
    snap, err = recorded_oom(tmp_path, "leak", "--track")
    j = oom_json(snap)
    assert j["alive"]["flagged"] >= 5, j["alive"]
    top = j["alive"]["lines"][0]
    assert "oom_prog.py:" in top["line"] and top["flagged"] >= 5, top
    assert verified(j) == ["free_flagged", "device"], j["fixes"]
    free = next(f for f in j["fixes"] if f["kind"] == "free_flagged")
    assert free["storages"] >= top["flagged"] and free["peak_reserved"] < j["device"]["reserved"], free
    assert "fits" in run([CLI, "oom", snap])[1]
    # run's end says first what piled up, and what holds it
    line = next(i for i, t in enumerate(open(PROG), 1) if "# ACT_LINE" in t)
    piled = next((t for t in err.splitlines() if t.startswith("  piled up before it: ")), "")
    assert f"oom_prog.py:{line}" in piled and "alive after their last use, held by " in piled \
        and "local 'history' \u2192 list[" in piled, err[-3000:]
    assert piled.endswith("a fix that fits this request only moves the OOM later while it grows")
    assert err.index("  piled up before it:") < err.index("  fixes that fit"), err[-3000:]


def test_a_kept_list_without_track_is_said_to_pile_up_before_the_fixes(tmp_path):
    """The same loop under plain `vramtrace run` (PyTorch's blocks, no
    tensors): its end names the line that allocated step after step and
    never freed before it lists the fixes that fit the request (a bigger
    device fits it, and the next step's request would not fit again).
    Found on pytorch/examples' VAE keeping each batch's reconstruction:
    the fixes offered were expandable segments and a bigger device, and
    the never-freed line was said only in `vramtrace oom`'s list."""
    snap, err = recorded_oom(tmp_path, "leak")
    line = next(i for i, t in enumerate(open(PROG), 1) if "# ACT_LINE" in t)
    piled = next((t for t in err.splitlines() if t.startswith("  piled up before it: ")), "")
    assert f"oom_prog.py:{line}" in piled, err[-3000:]
    assert re.search(r", never freed, \d+ allocations step after step \([\d.]+ MiB alive at "
                     r"the OOM\): a fix that fits", piled), piled
    assert err.index("  piled up before it:") < err.index("  fixes that fit"), err[-3000:]
    text = run([CLI, "oom", "--no-replay", snap])[1]
    assert piled in text, text
    alive = oom_json(snap)["alive"]
    assert f"oom_prog.py:{line}" in alive["lines"][alive["piled_up"]]["line"], alive


def test_activations_held_by_reference_cycles_fit_with_a_gc_collect_before_the_retry(tmp_path):
    snap, _ = recorded_oom(tmp_path, "cycle", "--track")
    j = oom_json(snap)
    # the program's gc.collect() after the OOM freed them: a cycle held each
    assert j["alive"]["flagged"] >= 5, j["alive"]
    assert verified(j) == ["free_flagged", "gc_collect", "device"], j["fixes"]
    gc_fix = next(f for f in j["fixes"] if f["kind"] == "gc_collect")
    assert gc_fix["storages"] == j["alive"]["flagged"], (gc_fix, j["alive"])
    assert "held by reference cycles until gc ran" in run([CLI, "oom", snap])[1]


def test_an_oom_in_the_first_step_under_track_flags_nothing_however_long_its_exit_walk(tmp_path):
    """A deep model's first forward runs out of memory under `run --track`:
    no optimizer step, so `check` judges by time, and the exit snapshot's
    holder walk (here a hook sleeping 1.5 s, as the walk of a large heap
    takes) is vramtrace's time, not the program's. Before: the snapshot's
    time was after the walk, so every weight and activation had "lingered"
    a second and more (found on a torchvision ResNet-18 script: 105
    findings, and `oom` offered freeing them as a fix)."""
    snap = str(tmp_path / "first.vtsnap")
    rc, _, err = prog("first_step", snap, run_args=("--track",),
                      env={"VT_TEST_SLOW_SNAPSHOT_HOOK": "1.5"})
    assert rc != 0 and "OutOfMemoryError" in err, err[-3000:]
    rc, text, _ = run([CLI, "check", snap])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]
    assert "0 marks" in text, text[:3000]


def test_an_oom_in_the_first_step_without_track_flags_not_the_models_weights(tmp_path):
    """The same first forward under plain `vramtrace run` (the pool's blocks,
    judged by time): the weights moved to the device are one burst of
    allocations with nothing freed among them, not memory kept step after
    step, though the burst is most of a trace that ends at the OOM. Before:
    the weights' line (oom_prog.py's layers) was flagged `growth`, and, once
    the quiet before the exit snapshot no longer counted, `never-freed`."""
    snap = str(tmp_path / "first.vtsnap")
    rc, _, err = prog("first_step", snap)
    assert rc != 0 and "OutOfMemoryError" in err, err[-3000:]
    rc, text, _ = run([CLI, "check", snap])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]
    assert "rules: never-freed,growth;" in text, text[:3000]


def test_nothing_but_a_bigger_device_fits(tmp_path):
    snap, _ = recorded_oom(tmp_path, "big")
    # reachable from Python, as the command's JSON
    j = vramtrace.oom_report(snap)
    assert j is not None and verified(j) == ["device"], j["fixes"]
    dev = j["fixes"][0]
    assert dev["kind"] == "device" and dev["capacity"] >= 300 << 20, dev
    # a device of that size holds the program, libraries' memory and all (the
    # search stopped at the pool's own peak before, and found none that fit)
    rc, out, err = prog("big", mem=str(dev["capacity"]))
    assert rc == 0 and "done" in out, err[-3000:]
    assert all(not f["fits"] for f in j["fixes"][1:]), j["fixes"]
    # cuBLAS's handle workspace (the simulator's, as the real one's: 32 MiB on
    # Hopper, from the driver): outside PyTorch's cache, and alive at the OOM
    # (it was said to hold 0 B: outside allocations are in no allocated curve)
    assert j["outside"]["libraries_reserved"] == j["outside"]["libraries_allocated"] == 32 * MIB, \
        j["outside"]
    text = vramtrace.oom_text(snap)
    assert "32 MiB held for libraries' own allocations (32 MiB of them alive)" in text, text
    assert "no setting and no earlier free would have fit: only more memory" in text, text
    assert "tried, would not fit:" in text, text


def test_the_weights_alive_at_an_oom_are_named_as_their_model_knows_them(tmp_path):
    """A model made on the device: its weights are first seen by the line
    that used them (`parameter, first used by ...`) and renamed after the
    model at the first optimizer step's mark. The OOM's lines name them by
    what they are called at the OOM. Before: by their first sight's name
    (found on Hugging Face's Trainer, whose model is moved to the device
    inside `Trainer(...)`: "parameter, first used by \"model =
    GPT2LMHeadModel(cfg)\"" where the weights were called
    GPT2LMHeadModel.transformer.wte.weight)."""
    snap, _ = recorded_oom(tmp_path, "weights", "--track")
    lines = oom_json(snap)["alive"]["lines"]
    named = [ln["tensor"] or "" for ln in lines]
    assert "Sequential.0.weight" in named, lines
    assert not any(n.startswith("parameter") for n in named), lines
    assert "tensor 'Sequential.0.weight'" in vramtrace.oom_text(snap)


def test_what_a_framework_made_under_the_programs_line_is_named_by_the_frameworks_lines(tmp_path):
    """A framework's evaluation loop (an installed library's lines: the
    folder is site-packages) concatenates every batch's predictions on the
    device until it runs out. The program's line says only
    `minitrainer.evaluate(...)`; under it, the OOM names the library's
    lines that made what was alive, the largest first, and the matrix
    product's cuBLAS workspace as a library's own. Found on Hugging Face's
    Trainer.evaluate() without eval_accumulation_steps: 134 MiB alive at
    `print(tr.evaluate())`, and nothing said it was transformers'
    torch_pad_and_concatenate's."""
    snap, err = recorded_oom(tmp_path, "evaluate")
    line = next(i for i, t in enumerate(open(PROG), 1) if "# EVALUATE_LINE" in t)
    lib = os.path.join(HERE, "site-packages", "minitrainer.py")
    concat = next(i for i, t in enumerate(open(lib), 1) if "# CONCAT_LINE" in t)
    top = oom_json(snap)["alive"]["lines"][0]
    assert f"oom_prog.py:{line}" in top["line"], top
    inside = top["inside"]
    assert f"minitrainer.py:{concat}" in inside[0]["line"] and not inside[0]["workspace"], inside
    assert inside[0]["bytes"] >= top["bytes"] // 2, inside
    # the first matrix product's cuBLASLt workspace, in PyTorch's cache
    ws = [x for x in inside if x["workspace"]]
    assert len(ws) == 1 and "Workspace" in ws[0]["line"] and ws[0]["bytes"] == 32 * MIB, inside
    # none of the program's own lines is said to be a library's
    assert all("oom_prog.py" not in x["line"] for x in inside), inside
    assert sum(x["bytes"] for x in inside) <= top["bytes"], (inside, top)
    text = vramtrace.oom_text(snap)
    assert "made inside it by the libraries' lines:" in text, text
    assert f"minitrainer.py:{concat}" in text, text
    # run's end says it too, before the fixes: half of what was alive or more
    most = next((t for t in err.splitlines() if t.startswith("  most of what was alive: ")), "")
    assert re.search(rf"made under evaluate .*oom_prog\.py:{line} .*by _concatenate "
                     rf".*minitrainer\.py:{concat}\b", most), err[-3000:]
    assert err.index("  most of what was alive:") < err.index("  fixes that fit"), err[-3000:]
    # and summary's call sites at the peak, the same way
    rc, out, _ = run([CLI, "summary", snap])
    assert rc == 0 and re.search(rf"evaluate .*oom_prog\.py:{line} .*\n\s+inside it, most by a "
                                 rf"library: .* _concatenate .*minitrainer\.py:{concat}\b", out), out
    # a program calling torch alone has no such lines
    snap2, err2 = recorded_oom(tmp_path, "leak")
    assert "most of what was alive" not in err2, err2[-3000:]
    assert all(not ln["inside"] for ln in oom_json(snap2)["alive"]["lines"]), snap2
    assert "made inside it" not in vramtrace.oom_text(snap2)


def test_an_oom_after_the_ring_overwrote_the_start_is_explained_as_the_whole_run_is(tmp_path):
    """oom_prog.py late under a 1024-event ring: what the first steps kept
    (and the weights) was allocated before the window. The replay makes what
    was held when the window opened first (the snapshot's state: PyTorch's
    blocks, format 1.10; and a library's segments outside the pool), so it
    runs out where the program did and verifies the same fix as the whole
    recording does. Before, it started empty, fitted, and no fix was
    verified."""
    whole = str(tmp_path / "whole.vtsnap")
    rc, out, whole_err = prog("late", whole)
    assert rc == 1 and "fixes that fit, checked by replaying the run: a device" in whole_err, \
        whole_err[-3000:]
    snap, err = recorded_oom(tmp_path, "late", "--conf", "max_events:1024")
    fix = re.search(r"fixes that fit, checked by replaying the run: a device with [\d.]+ MiB",
                    err)
    assert fix and fix.group(0) in whole_err, (err[-3000:], whole_err[-3000:])
    j, w = oom_json(snap), oom_json(whole)
    assert j["replay"]["reproduced"] is True, j["replay"]
    assert j["replay"]["events_lost"] > 0 and j["replay"]["before_window_bytes"] >= 100 * MIB, \
        j["replay"]
    assert w["replay"]["events_lost"] == 0, w["replay"]
    assert verified(j) == verified(w) and verified(j), (j["fixes"], w["fixes"])
    assert j["replay"]["min_capacity"] == w["replay"]["min_capacity"], (j["replay"], w["replay"])
    text = vramtrace.oom_text(snap)
    assert "as recorded, the replay runs out of memory too" in text, text


def test_an_evaluation_that_runs_out_names_its_growing_line_without_track(tmp_path):
    """An evaluation that keeps each batch's graph (eval_keep.py, no marks,
    plain `vramtrace run`) runs out of memory: the OOM's lines alive are
    annotated with what `check` says of their call sites (judged by time:
    never freed through the run), the model's line first. Before: the lines
    alone, with "no tensors recorded"."""
    snap = str(tmp_path / "eval.vtsnap")
    script = os.path.join(HERE, "eval_keep.py")
    line = next(i for i, t in enumerate(open(script), 1) if "# MODEL_LINE" in t)
    rc, _, err = run([SIMRUN, "--mem", "96M", "--", CLI, "run", "-o", snap, "--",
                      sys.executable, script, "leak"])
    assert rc != 0 and "OutOfMemoryError" in err, err[-3000:]
    rc, out, err = run([CLI, "oom", "--no-replay", snap])
    assert rc == 0, err
    alive = out[out.index("alive at the OOM"):]
    first = alive.splitlines()[1:3]
    assert f"eval_keep.py:{line}" in first[0], alive[:2000]
    assert first[1].strip().startswith("check: never freed, ") and \
        first[1].strip().endswith("allocations through the run (never-freed)"), alive[:2000]


# A batch-size search as libraries write it (accelerate's
# find_executable_batch_size, Lightning's BatchSizeFinder): try, catch
# torch.OutOfMemoryError, empty the cache, halve, try again.
BATCH_SEARCH = '''
import torch
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
bs = 65536
while True:
    try:
        x = torch.randn(bs, 1024, device="cuda")
        model(x).sum().backward()
        break
    except torch.OutOfMemoryError:
        x = None
        torch.cuda.empty_cache()
        bs //= 2
print("batch", bs)
'''


def test_a_batch_size_search_that_caught_its_oom_is_told_it_went_on(tmp_path):
    """The program caught the error and went on, as without vramtrace (the
    same batch found): run's short explanation says so, with what came
    after, instead of reading as a crash."""
    script = tmp_path / "batch_search.py"
    script.write_text(BATCH_SEARCH)
    rc, plain, err = run([SIMRUN, "--mem", "2G", "--", sys.executable, str(script)])
    # the baseline ends right after a CUDA backward: PyTorch's own abort at
    # exit is excused there once it printed its batch
    assert rc == 0 or (procs.pytorch_exit_abort(rc, err) and plain.startswith("batch ")), \
        err[-3000:]
    snap = str(tmp_path / "search.vtsnap")
    rc, out, err = run([SIMRUN, "--mem", "2G", "--", CLI, "run", "-o", snap, "--",
                        sys.executable, str(script)])
    assert rc == 0 and out == plain, (out, plain, err[-3000:])
    assert "the program ran out of device memory: 1 GiB asked" in err, err[-3000:]
    assert "  it went on: the error was caught, " in err, err[-3000:]
    j = oom_json(snap)
    assert j["request"]["allocations_after"] > 0, j["request"]
    assert "batch_search.py:" in j["request"]["line"], j["request"]


def test_free_memory_in_the_other_pool_is_said_not_to_serve_an_fsdp2_request(tmp_path):
    """fsdp_eval_kept.py (FSDP2, laid out as pytorch/examples' example) with
    its evaluation keeping every output's graph, in 200 MiB: a request of
    1 MiB or less runs out with 16 MiB free in the cache, all of it in the
    large pool, which never serves the small pool's requests (a two-rank
    run of the example itself: 13 KiB asked on a stream of FSDP2's own, 22
    MiB free on other streams). Before, the report said only that 0 % of
    the free bytes were in pieces smaller than the request."""
    snap = str(tmp_path / "fsdp.vtsnap")
    rc, _, err = run([SIMRUN, "--mem", "200M", "--", CLI, "run", "-o", snap, "--",
                      sys.executable, os.path.join(HERE, "fsdp_eval_kept.py"), "leak"])
    assert rc == 1 and "OutOfMemoryError" in err, err[-3000:]
    assert "none of the pieces big enough (" in err and \
        ") is on the stream that asked, in its pool: a cached piece serves only the stream " \
        "and pool it was made for\n" in err, err[-3000:]
    rc, text, err = run([CLI, "oom", snap, "--no-replay"])
    assert rc == 0, err
    request = json.loads(run([CLI, "oom", snap, "--json", "--no-replay"])[1])
    q, d = request["request"], request["device"]
    assert q["size"] <= MIB, q      # the small pool's
    assert d["fit_where_served"] == 0 < d["fit_elsewhere"] <= d["cache_free"], d
    assert all(g["largest"] < q["size"] for g in d["free_by_pool"] if g["pool"] == "small"), d
    assert re.search(r"\n  none of it where this request is served: a cached piece serves only the "
                     r"stream and pool it was made for, and the small pool on stream 0x[0-9a-f]+ "
                     r"has no piece of [0-9.]+ [KM]i?B; [0-9.]+ MiB in pieces that big are on "
                     r"other streams or in the other pool\n", text), text[:3000]


def test_a_retry_inside_the_except_clause_is_told_what_the_failed_call_still_holds(tmp_path):
    """oom_prog.py retry: a step too big, its OutOfMemoryError caught and
    the step retried with a quarter of the batch inside the except clause,
    which runs out too: the first attempt's input and activation are still
    held by the exception's traceback (PyTorch's FAQ). The OOM explained is
    the one the program ended with, not the one it caught; the report says
    how much the call that ran out before still holds, and the retry after
    the except clause is a fix the replay verifies (the earlier OOM failing
    there as it did). Its twin, retried after the except clause, runs to
    the end, and what the caught OOM's call made is not said to be held."""
    snap, err = recorded_oom(tmp_path, "retry")
    retry = line_in(PROG, "def _retry(inside: bool) -> None:")
    call = line_in(PROG, "train_step(batch)", after=retry)
    assert "  the last of 2 OOMs, the one the program ended with; the earlier one was caught" \
        in err, err[-3000:]
    assert f"alive here was made by train_step(batch) (oom_prog.py:{call}), which ran out of " \
           "memory before" in err, err[-3000:]
    j = oom_json(snap)
    q, held = j["request"], j["held_since_caught"]
    assert (q["index"], q["ooms_recorded"], q["allocations_after"]) == (2, 2, 0), q
    assert held is not None and held["call"] == f"train_step(batch) (oom_prog.py:{call})", held
    # the first attempt's batch and its first layer's output: 8192 x 1024 floats each
    assert held["bytes"] >= 2 * 32 * MIB and held["size"] >= 32 * MIB, held
    assert "retry_outside" in verified(j), j["fixes"]
    first = vramtrace.oom_report(snap, which=1)
    assert first["request"]["index"] == 1 and first["held_since_caught"] is None, first["request"]
    with pytest.raises(vramtrace.VramtraceError, match="holds 2 out-of-memory events, not 3"):
        vramtrace.oom_report(snap, which=3)
    # the fix, applied: the retry after the except clause fits
    after = str(tmp_path / "after.vtsnap")
    rc, out, err = prog("retry_after", after)
    assert rc == 0 and "batch 2048" in out, err[-3000:]
    assert "  it went on: the error was caught, " in err and "alive here was made by" not in err, \
        err[-3000:]
    j = oom_json(after)
    assert j["request"]["index"] == 1 and j["held_since_caught"] is None, j["request"]


def test_a_librarys_own_allocation_beside_pytorchs_full_cache_is_said_to_be_outside_it(tmp_path):
    """oom_prog.py library: PyTorch's cache keeps 240 MiB of freed blocks
    on a 256 MiB device when the first matrix product makes cuBLAS's handle
    (32 MiB of its own device memory): CUBLAS_STATUS_ALLOC_FAILED, as users
    meet it. The recording marks the failed request as not PyTorch's (format
    1.13); the report says it was a library's own allocation that the free
    cached memory could not serve, the replay reproduces it (PyTorch gives
    its cached blocks back only for its own requests), and
    torch.cuda.empty_cache() before it is a verified fix: the program with
    it runs to the end."""
    snap = str(tmp_path / "library.vtsnap")
    rc, _, err = prog("library", snap)
    assert rc == 1 and "CUBLAS_STATUS_ALLOC_FAILED" in err, err[-3000:]
    assert "  a library's own allocation (cublasCreate" in err, err[-3000:]
    assert "free in PyTorch's cache could not serve it" in err, err[-3000:]
    j = oom_json(snap)
    assert j["request"]["library"] is True and j["request"]["size"] == 32 * MIB, j["request"]
    assert j["replay"]["reproduced"] is True, j["replay"]
    assert "empty_cache" in verified(j), j["fixes"]
    dev = next(f for f in j["fixes"] if f["kind"] == "device")
    assert dev["verified"] and dev["capacity"] >= j["device"]["reserved"] + 32 * MIB, dev
    # the fix, applied
    rc, out, err = prog("library_emptied", str(tmp_path / "emptied.vtsnap"))
    assert rc == 0 and "done" in out and "ran out of device memory" not in err, err[-3000:]
    # a request of PyTorch's own is not a library's
    snap, _ = recorded_oom(tmp_path, "big")
    assert oom_json(snap)["request"]["library"] is False


def graph_pool_oom(tmp_path, mode: str, capture: str, said: str) -> Tuple[str, int, dict, str]:
    """oom_prog.py MODE's OOM beside a CUDA graph's pool: run's end must say
    ``said`` of the pool, captured at the line of _MODE that reads
    ``capture``; (the snapshot, that line, oom's JSON, the run's stderr)."""
    snap, err = recorded_oom(tmp_path, mode)
    line = line_in(PROG, capture)
    assert re.search(re.escape(said) + rf" \(captured at _{mode} \S*oom_prog\.py:{line}\b",
                     err), err[-3000:]
    return snap, line, oom_json(snap), err


def test_a_cuda_graphs_private_pool_is_said_and_deleting_the_graph_is_the_verified_fix(tmp_path):
    """oom_prog.py graph: a step captured in a CUDA graph, whose private pool
    keeps 64 MiB (32 MiB of it a wholly free segment), then a request the
    rest of the device cannot hold. PyTorch serves no other request from a
    live graph's pool and gives it back only once the graph is deleted
    (release_cached_blocks frees graph_pools_freeable only). Before, the
    pool's free segment read as free in the cache and the replay, with no
    private pools, did not run out where the program did ("no fix is
    verified", allocator settings "fitting" that would not). Now the
    recording marks the pool's segments (format 1.14), the report names the
    pool and the capture's line, the replay runs out as the program did, and
    deleting the graph is the verified fix: the program with `del graph`
    runs to the end."""
    snap, line, j, err = graph_pool_oom(tmp_path, "graph", "y = (x * 2).sin() + x",
                                        "64 MiB is held by a CUDA graph's private pool")
    pools = j["device"]["graph_pools"]
    assert pools["reserved"] == 64 * MIB and pools["free"] == 32 * MIB, pools
    assert pools["free_segments"] == 32 * MIB and pools["pools"] == 1, pools
    assert re.match(rf"_graph \S*oom_prog\.py:{line}\b", pools["line"]), pools
    # the pool's free segment is not free in the cache
    assert j["device"]["cache_free"] == 0, j["device"]
    assert "64 MiB allocated of 96 MiB reserved; nothing free in the cache\n" in err, err[-3000:]
    # summary's reserved-but-unallocated says how much of it is the graph's
    rc, out, _ = run([CLI, "summary", snap])
    assert rc == 0 and "  CUDA graph pools: 64 MiB of the reserved now, 32 MiB of it free" in out, out
    assert j["replay"]["reproduced"] is True, j["replay"]
    assert set(verified(j)) == {"delete_graphs", "device"}, j["fixes"]
    # the fix, applied
    rc, out, err = prog("graph_deleted", str(tmp_path / "deleted.vtsnap"))
    assert rc == 0 and "done" in out and "ran out of device memory" not in err, err[-3000:]
    # PyTorch's own snapshot of the same OOM (its recorder's pool_id and
    # segment_pool_id, as torch writes them): the same pool, the same fix
    pickle_path = str(tmp_path / "graph.pickle")
    rc, out, err = prog("graph", "", "--torch-snapshot", pickle_path)
    assert rc == 1 and os.path.exists(pickle_path), err[-3000:]
    pj = oom_json(pickle_path)
    assert pj["device"]["graph_pools"] == dict(pools, line=pj["device"]["graph_pools"]["line"]), \
        (pj["device"]["graph_pools"], pools)
    assert pj["device"]["cache_free"] == 0 and "delete_graphs" in verified(pj), pj["fixes"]
    # a run longer than the ring (the graph replayed between small steps):
    # the capture's events are overwritten, the snapshot's state still says
    # which segments are the graph's (SEGMENT_POOLS), and a block alive in
    # them where the capture ran
    snap, err = recorded_oom(tmp_path, "graph_late", "--conf", "max_events:1024")
    j = oom_json(snap)
    sj = json.loads(run([CLI, "json", snap])[1])
    assert sj["meta"]["events_overwritten"] > 1000 and sj["counts"].get("SEGMENT_ALLOC", 0) == 0, \
        (sj["meta"], sj["counts"])
    assert re.search(r"64 MiB is held by a CUDA graph's private pool \(captured at _graph "
                     rf"\S*oom_prog\.py:{line}\b", err), err[-3000:]
    assert j["device"]["graph_pools"]["free_segments"] == 32 * MIB, j["device"]
    assert j["replay"]["reproduced"] is True and "delete_graphs" in verified(j), j["fixes"]


def test_a_request_made_during_a_graphs_capture_or_into_a_mem_pool_is_said_to_be_so(tmp_path):
    """oom_prog.py graph_capture: the capture itself asks 200 MiB, which
    PyTorch serves from the graph's private pool only (its trace entry names
    the pool, format 1.15). Before, nothing said the request was the
    capture's, and deleting the graph (the one being captured) was tried as a
    fix. Now the report says so, with the capture's line; PyTorch's own
    snapshot of the OOM (its "oom" entry's pool_id) says the same once
    imported. mem_pool: a torch.cuda.MemPool the program made is named as
    such, not as a CUDA graph's pool."""
    snap, err = recorded_oom(tmp_path, "graph_capture")
    line = line_in(PROG, "y = (x * 2).sin() + x")
    assert re.search(r"  asked while a CUDA graph was being captured \(captured at _graph "
                     rf"\S*oom_prog\.py:{line}\b.*\):\n  PyTorch serves it from that pool only, "
                     r"which keeps what it takes as long as the graph lives", err), err[-3000:]
    j = oom_json(snap)
    pool = j["request"]["private_pool"]
    assert pool["kind"] == "capture" and pool["id"] > 0 and pool["id"] % 2 == 0, pool
    assert re.match(rf"_graph \S*oom_prog\.py:{line}\b", pool["line"]), pool
    assert "delete_graphs" not in {f["kind"] for f in j["fixes"]}, j["fixes"]
    pickle_path = str(tmp_path / "capture.pickle")
    rc, out, err = prog("graph_capture", "", "--torch-snapshot", pickle_path)
    assert rc == 1 and os.path.exists(pickle_path), err[-3000:]
    assert oom_json(pickle_path)["request"]["private_pool"]["id"] == pool["id"]
    # a request of the default pool has none
    snap, _ = recorded_oom(tmp_path, "big")
    assert oom_json(snap)["request"]["private_pool"] is None
    snap, err = recorded_oom(tmp_path, "mem_pool")
    assert "  asked into a private pool the program made (torch.cuda.MemPool" in err, err[-3000:]
    j = oom_json(snap)
    assert j["request"]["private_pool"]["kind"] == "program", j["request"]
    assert j["device"]["graph_pools"]["program_made"] is True, j["device"]
    rc, out, _ = run([CLI, "summary", snap])
    assert rc == 0 and "  private pools the program made: 32 MiB of the reserved now" in out, out


def test_torch_compiles_cuda_graphs_pool_is_said_to_be_its_and_a_reset_is_the_verified_fix(
        tmp_path):
    """oom_prog.py compiled_graphs: a model compiled with
    torch.compile(backend="cudagraphs") (PyTorch's own cudagraph trees, no
    code of ours) run three times, then a request the rest of the device
    cannot hold. The trees' private pool is wholly free between calls, yet
    PyTorch gives none of it back while the trees live: the report says the
    memory is torch.compile's graphs' (a frame of cudagraph_trees.py in the
    capture's stack), at the program's line that called the compiled model,
    and torch._dynamo.reset() is the verified fix, not deleting a graph the
    program never held; applied, the program runs to the end."""
    _, _, j, _ = graph_pool_oom(tmp_path, "compiled_graphs", "out = step(x)",
                             "MiB is held by torch.compile's CUDA graphs in their private pool")
    pools = j["device"]["graph_pools"]
    assert pools["compiled"] is True and pools["free"] == pools["reserved"] > 0, pools
    assert set(verified(j)) == {"delete_graphs", "device"}, j["fixes"]
    fix = next(f for f in j["fixes"] if f["kind"] == "delete_graphs")
    assert fix["conf"].startswith("torch._dynamo.reset() before it"), fix
    rc, out, err = prog("compiled_graphs_reset", str(tmp_path / "reset.vtsnap"))
    assert rc == 0 and "done" in out and "ran out of device memory" not in err, err[-3000:]


def test_memory_a_caught_probe_still_holds_steps_later_is_said_without_blaming_a_handler(tmp_path):
    """oom_prog.py probe_kept: a probe keeps the 64 MiB batch it made, runs
    out (caught), training steps follow, then an OOM the kept batch helps
    cause. What the probe's call still holds is said, with no claim about
    an except clause (steps ran between the two), and the call is named by
    its line without the line's trailing comment; freeing it there is
    replayed, and does not fit (the request is too big for the rest)."""
    snap, err = recorded_oom(tmp_path, "probe_kept")
    line = line_in(PROG, "probe(16384)")
    assert f"64 MiB alive here was made by probe(16384) (oom_prog.py:{line}), which ran out " \
           "of memory before and was caught" in err, err[-3000:]
    assert "retry inside the except clause" not in err, err[-3000:]
    j = oom_json(snap)
    held = j["held_since_caught"]
    assert held["in_handler"] is False and held["bytes"] == 64 * MIB, held
    assert held["call"] == f"probe(16384) (oom_prog.py:{line})", held
    free = next(f for f in j["fixes"] if f["kind"] == "retry_outside")
    assert free["conf"].startswith("free the 64 MiB probe(16384)") and not free["verified"], free


def test_accelerates_batch_size_search_ending_in_cublas_beside_a_full_cache(tmp_path):
    """accel_batch_search.py: accelerate's own find_executable_batch_size on
    256 MiB. Every batch tried runs out and is caught, until a retry's
    backward makes cuBLAS's handle with PyTorch's cache holding the freed
    blocks of the attempts before: CUBLAS_STATUS_ALLOC_FAILED ends it. The
    run's end explains that last OOM (not the first caught one), as a
    library's own allocation the cache could not serve, the replay
    reproduces it, and torch.cuda.empty_cache() before it is verified."""
    prog_path = os.path.join(HERE, "accel_batch_search.py")
    snap = str(tmp_path / "search.vtsnap")
    rc, out, err = run([SIMRUN, "--mem", MEM, "--", CLI, "run", "-o", snap, "--",
                        sys.executable, prog_path])
    assert rc == 1 and "CUBLAS_STATUS_ALLOC_FAILED" in err, err[-3000:]
    tried = out.count("trying batch")
    assert tried >= 3, out
    assert re.search(r"  the last of \d+ OOMs, the one the program ended with; the earlier ones "
                     r"were caught", err), err[-3000:]
    assert "  a library's own allocation (cublasCreate" in err, err[-3000:]
    j = oom_json(snap)
    q = j["request"]
    assert q["library"] is True and q["index"] == q["ooms_recorded"] >= tried - 1, q
    assert f"accel_batch_search.py:{line_in(prog_path, 'loss.backward()')} (def" in q["line"], q
    assert j["replay"]["reproduced"] is True, j["replay"]
    assert "empty_cache" in verified(j), j["fixes"]
