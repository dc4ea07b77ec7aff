"""Python frames in the stacks of a real PyTorch program, without track():
a leak at a known line of py_leak.py is grouped under that file:line by
`vramtrace leaks` and named by `summary`'s top call sites, whichever way the
program reached vramtrace; what the autograd engine thread kept is shown
under the program's backward call, and under track() under the forward op it
differentiates ("forward of"). This driver itself never
imports torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import procs

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
BACKWARD_LINE = next(i for i, line in enumerate(open(os.path.join(HERE, "py_leak.py")), 1)
                     if "y.sum().backward()" in line)


def run(cmd, env=None, cwd=None):
    """cmd's output (procs.run's), asserting it exited 0."""
    rc, out = procs.run(cmd, env, cwd=cwd)
    assert rc == 0, f"{cmd} exited {rc}:\n{out[-4000:]}"
    return out


@pytest.mark.parametrize("way", ["run", "pluggable"])
def test_leak_is_grouped_under_its_python_line(tmp_path, way):
    snap = str(tmp_path / f"{way}.vtsnap")
    cmd = [SIMRUN, "--mem", "1G", "--"]
    env = {}
    if way == "run":
        cmd += [CLI, "run", "-o", snap, "--"]
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    out = run(cmd + [sys.executable, os.path.join(HERE, "py_leak.py"), way, snap], env)
    leak = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    site = f"step {leak['file']}:{leak['line']}"

    leaks = run([CLI, "leaks", snap])
    groups = leaks.split("\n\n")
    mine = [g for g in groups if site in g]
    assert len(mine) == 1, leaks[-6000:]
    assert re.match(r"Leak of 9(\.0+)? MiB in 3 allocations from:", mine[0]), mine[0]
    # read outermost first: main's call of step, then step's line, then torch
    text = mine[0]
    assert text.index(site) < text.index(f"main {leak['file']}:"), text
    assert "_PyEval_EvalFrameDefault" not in text      # folded by default
    assert "_PyEval_EvalFrameDefault" in run([CLI, "leaks", "--all-frames", snap])

    summary = run([CLI, "summary", snap])
    sites = summary[summary.index("top call sites"):]
    assert re.search(r"9(\.0+)? MiB\s+3 allocations\s+" + re.escape(site), sites), sites

    # backward runs on PyTorch's autograd engine thread, which runs no Python
    # code: what it allocated and kept (cuBLAS's handle workspace for that
    # thread) is lent the frames of the backward call it computed, the
    # program's `y.sum().backward()` line (before: "from a thread running no
    # Python code", "[thread without Python frames]")
    bw = f"step {leak['file']}:{BACKWARD_LINE}"
    handle = [g for g in groups if "setWorkspaceForHandle" in g]
    assert len(handle) == 1 and bw in handle[0], leaks[-6000:]
    assert "(from a thread running no Python code" not in leaks, leaks[-6000:]
    assert bw in sites and "[thread without Python frames]" not in sites, sites


@pytest.mark.parametrize("ops_seen_by", ["mode", "observer"])
def test_backward_allocation_under_track_shows_forward_of_its_forward_line(tmp_path, ops_seen_by):
    """backward_leak.py keeps every step's gradient of an intermediate, made on
    the autograd engine's device thread: under track() it is grouped by
    `leaks`, and reported by `check` (text and JSON), under "forward of" the
    line of the forward op (h = torch.tanh(x @ w)). The mode runs the op
    inside functions named so; the op observer (VRAMTRACE_TRACK_OBSERVER=1,
    built at first use) lends the engine thread those frames while the op
    runs (vt_thread_python_stack)."""
    snap, out = str(tmp_path / "bwd.vtsnap"), str(tmp_path / "bwd.json")
    prog = os.path.join(HERE, "backward_leak.py")
    run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--", sys.executable, prog, out, snap],
        {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
         "VRAMTRACE_TRACK_OBSERVER": "1" if ops_seen_by == "observer" else "0"}, cwd=tmp_path)
    with open(out) as f:
        info = json.load(f)
    line, n, nbytes = info["forward_line"], info["kept"], info["grad_bytes"]
    site = f"forward of main {prog}:{line}"

    groups = run([CLI, "leaks", snap]).split("\n\n")
    kept = [g for g in groups if g.startswith(f"Leak of {n * nbytes >> 10} KiB in {n} allocations")]
    assert len(kept) == 1, groups
    assert site in kept[0] and "(from a thread running no Python code" not in kept[0], kept[0]
    # track()'s own dispatch frames are vramtrace's, not the program's: folded
    # like torch's plumbing, shown with --all-frames. (Its __torch_dispatch__
    # is C, with no Python frame; on the engine thread it hands the op to
    # Tracker._engine_dispatch, which runs it through _engine_op.)
    ours = ("__torch_dispatch__", " _engine_op ", "_engine_dispatch", "_trackfast",
            "_observed", "trackobs")
    assert not any(f in kept[0] for f in ours), kept[0]
    assert info["observer"] == (ops_seen_by == "observer")
    if ops_seen_by == "mode":
        every = run([CLI, "leaks", "--all-frames", snap])
        assert "_engine_dispatch" in every and " _engine_op " in every, every[:4000]
        assert "trackfast/dispatch.c" in every, every[:4000]

    text = subprocess.run([CLI, "check", snap], capture_output=True, text=True, timeout=120)
    assert text.returncode == 1, text.stderr
    assert f"at forward of main ({prog}:{line})" in text.stdout, text.stdout[:4000]
    rep = json.loads(subprocess.run([CLI, "check", snap, "--json"], capture_output=True,
                                    text=True, timeout=120).stdout)
    # the gradients of steps followed by a complete unused step, held by `kept`
    assert len(rep["findings"]) == n - 1, [f["owner"] for f in rep["findings"]]
    for f in rep["findings"]:
        assert f["bytes"] == nbytes and f["device"] == 0
        assert f"backward_leak.py:{line}, backward: aten." in f["owner"]["name"], f["owner"]
        for where in (f["alloc"]["stack"], f["last_use"]["stack"]):
            fwd = [fr for fr in where if fr["function"] == "forward of main"]
            assert fwd and fwd[0]["file"] == prog and fwd[0]["line"] == line, where
        assert any("frame local 'kept'" in p["text"] for p in f["paths"]), f["paths"]


def test_backward_ops_under_the_observer_record_as_under_the_mode(tmp_path):
    """On the device, backward runs on the autograd engine's device thread:
    the op observer holds those ops back with the forward's frames lent
    (read from the extension's table without the GIL, or asked of Python
    without it) and hands over what is alive after the backward; the
    dispatch mode runs them under functions named after those frames and
    records each as it ends. engine_ops.py runs the same loop each way: the
    tensors alive at its end are the same, with the same epochs, and every
    kept gradient is named by the user's forward line under the observer.
    Where the two differ, by design: a gradient on memory that a backward
    output dead by the hand-over made (a parameter's .grad is AccumulateGrad's
    detach of the mm that made it) is that memory's first tensor under the
    observer, with the frames of the op that made it; the mode records the
    dead output too and the gradient as its view, named by the op alone."""
    out = str(tmp_path / "engine.json")
    run([SIMRUN, "--mem", "1G", "--", sys.executable, os.path.join(HERE, "engine_ops.py"), out],
        {"VRAMTRACE_TRACK_OBSERVER": "1"})
    with open(out) as f:
        got = json.load(f)
    c, mode, untabled = got["c"], got["mode"], got["c_untabled"]
    assert c["observer"] and not mode["observer"] and untabled["observer"]
    assert c["errors"] == 0 and mode["errors"] == 0 and untabled["errors"] == 0
    assert c["ops"] > 0 and mode["ops"] > 0
    # the observer holds the engine thread's ops back until a flush (or the
    # program's next op); the mode records each as it ends
    assert c["held"] > 0 and untabled["held"] == c["held"] and mode["held"] == 0, \
        (c["held"], mode["held"])
    assert c["alive"] == untabled["alive"] and c["grads"] == untabled["grads"]
    # the same tensors alive, used last in the same steps; the parameters
    # named alike, the backward's outputs never views under the observer
    assert [a[2] for a in c["alive"]] == [a[2] for a in mode["alive"]]
    params = [a for a in c["alive"] if "backward: " not in a[0]]
    assert params == [a for a in mode["alive"] if "backward: " not in a[0]] and len(params) == 6
    assert not any(a[1] for a in c["alive"]), c["alive"]
    activation, in_model, in_head = c["kept_per_step"]
    per_step = activation + in_model + in_head
    assert len(c["grads"]) == len(mode["grads"]) == c["steps"] * per_step
    # the frames to lend read from the extension's table, without the GIL:
    # every node a forward op made is there, and an AccumulateGrad node (a
    # parameter's .grad; no forward op made it) is never asked about, so
    # Python is never asked; without the table, it is asked for each
    assert c["asked"] == 0 and untabled["asked"] > 0, (c, untabled)
    line = got["forward_line"]
    site = f"h = torch.relu(model(x)) (engine_ops.py:{line}, backward: aten."
    head_site = f"head(h).square().mean().backward() (engine_ops.py:{line + 2}, backward: aten."
    for k, g in enumerate(c["grads"]):
        in_step = k % per_step
        assert g and g.startswith(head_site if in_step >= activation + in_model else site), \
            (k, c["grads"])
    # h.grad by the mode too: it is the activation's own (a clone, no view)
    assert all(g.startswith(site) for g in mode["grads"][::per_step]), mode["grads"]


def test_backward_of_a_model_deep_in_modules_is_named_by_the_users_line(tmp_path):
    """engine_ops.py with its model called through 6 more modules (a GPT-2
    block's ops sit about 20 Python frames under the line that called the
    model): a backward op is lent its forward's innermost frames, and those
    must reach the program's own line, which names what the op makes. With
    16 frames lent, the gradients were named by torch's module.py instead
    (`return forward_call(*args, **kwargs) (module.py:1794, backward: ...)`),
    on the observer's way and on the mode's."""
    out = str(tmp_path / "engine.json")
    run([SIMRUN, "--mem", "1G", "--", sys.executable, os.path.join(HERE, "engine_ops.py"),
         out, "6"], {"VRAMTRACE_TRACK_OBSERVER": "1"})
    with open(out) as f:
        got = json.load(f)
    line = got["forward_line"]
    site = f"h = torch.relu(model(x)) (engine_ops.py:{line}, backward: aten."
    for way in ("c", "c_untabled", "mode"):
        g = got[way]
        assert g["errors"] == 0 and g["grads"], (way, g)
        per_step = sum(g["kept_per_step"])
        # h.grad (the activation's, first each step) on every way; the
        # parameters' gradients too where the observer saw them made
        grads = g["grads"] if way != "mode" else g["grads"][::per_step]
        named = [n for k, n in enumerate(grads)
                 if way == "mode" or k % per_step < 1 + g["kept_per_step"][1]]
        assert named and all(n and n.startswith(site) for n in named), (way, named)
