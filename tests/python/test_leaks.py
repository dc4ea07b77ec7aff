"""End to end: the five leak shapes (leak_shapes.py) traced with the real
library, checked with the real `vramtrace check --json`. The leak must be
flagged -- the right storages, their exact bytes, a retention path naming
the holder -- and its fixed twin must come out clean."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
from conftest import DEVICES, line_of, run_traced, vt_check, vt_cli  # noqa: E402


def _cli() -> str:
    return vt_cli()


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """``traced(shape, twin, *extra, device=)``: leak_shapes.py run once per
    arguments, its info (with "snap") shared by the tests that read that run
    (each run is a torch process; the tests only read its snapshot)."""
    runs: dict = {}

    def run(shape: str, twin: str, *extra: str, device: str = "cpu") -> dict:
        key = (shape, twin, extra, device)
        if key not in runs:
            out = str(tmp_path_factory.mktemp(f"{shape}-{twin}") / f"{shape}-{twin}.vtsnap")
            runs[key] = run_traced(os.path.join(HERE, "leak_shapes.py"),
                                   [shape, twin, out, *extra], out, device=device, timeout=90)
        return runs[key]
    return run


def _check(snap: str) -> tuple:
    return vt_check(snap, timeout=60)


def _traced_check(traced, shape: str, twin: str, device: str = "cpu") -> tuple:
    """The steps of most tests here: the CLI found, ``traced``'s run of the
    shape's twin on device, checked: (info, rc, report)."""
    _cli()
    info = traced(shape, twin, device=device)
    rc, rep = _check(info["snap"])
    return info, rc, rep


SHAPES = ["cycle", "callback", "view", "pipeline", "hook"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
def test_leak_is_flagged_with_bytes_and_holder(shape, device, traced):
    info, rc, rep = _traced_check(traced, shape, "leak", device)
    expect = {int(a, 16): n for a, n in info["expect"].items()}
    assert expect, "the scenario retained nothing"
    found = {int(f["addr"], 16): f for f in rep["findings"]}
    text = "\n".join(p["text"] for f in rep["findings"] for p in f["paths"])
    assert rc == 1, text
    # Every retained storage is flagged, with its exact size ...
    missing = sorted(hex(a) for a in expect if a not in found)
    assert not missing, f"not flagged: {missing}\n{text}"
    for addr, nbytes in expect.items():
        assert found[addr]["bytes"] == nbytes
        assert found[addr]["rule"] == info["rule"]
        # on the device a storage is the allocator's own allocation
        assert found[addr]["external"] == (device == "cpu"), found[addr]
    # ... nothing else is (the weight, the batches, the grads are fine) ...
    extra = sorted(hex(a) for a in found if a not in expect)
    assert not extra, f"false positives: {extra}\n{text}"
    # ... and a retention path names what holds it (a collection's victims:
    # those a mark's walk saw before the collection).
    walked = {int(a, 16) for a in info["walked"]}
    for addr in expect:
        if info["rule"] == "cycle" and addr not in walked:
            continue
        paths = [p["text"] for p in found[addr]["paths"]]
        assert any(info["holder"] in p for p in paths), (hex(addr), paths)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
def test_fixed_twin_is_clean(shape, device, traced):
    _, rc, rep = _traced_check(traced, shape, "fixed", device)
    text = "\n".join(f"{f['addr']} {f['bytes']} {[p['text'] for p in f['paths']]}"
                     for f in rep["findings"])
    assert rep["findings"] == [], text
    assert rc == 0
    assert rep["tensors"] > 0 and rep["marks"] >= 6


def test_cycle_paths_are_marked_as_cycles(traced):
    info, _, rep = _traced_check(traced, "cycle", "leak")
    assert rep["findings"]
    walked = {int(a, 16) for a in info["walked"]}
    assert walked
    for f in rep["findings"]:
        assert f["freed"] is not None          # the final gc.collect() freed them
        assert f["rule"] == "cycle" and f["collected_by_gc"] is not None, f
        assert f["collected_by_gc"]["seq"] < f["freed"]["seq"]
        # the pairs a mark's walk saw are named by their cycle
        if int(f["addr"], 16) in walked:
            assert any(p["cycle"] and "Peer.act" in p["text"] for p in f["paths"]), f["paths"]


def test_cycle_victims_are_held_by_a_reference_cycle_until_gc_ran(traced):
    """The pipeline user's signal: storages a collection freed are said to
    be held by a reference cycle until gc ran, with their bytes and how long
    after their last use; the weight and the batches are not."""
    cli = _cli()
    info = traced("cycle", "leak")
    # every finding detailed (--top 0): each must say so
    r = subprocess.run([cli, "check", info["snap"], "--top", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    text = r.stdout
    n = len(info["expect"])
    assert text.count("held by a reference cycle until gc ran: the collection at") == n, text
    assert text.count("after its last use") == n
    assert "(cycle) Peer.peer → Peer.peer → Peer.act → tensor" in text
    each = 48 * 256 * 4 // 1024     # a B x D float activation (leak_shapes.py), KiB
    assert f"{n} findings, {n * each} KiB held after last use" in text
    assert "tensor 'w'" not in text and "randn" not in text


@pytest.mark.parametrize("twin", ["leak", "fixed"])
def test_cycles_the_tracker_collects_at_marks_are_reported_by_check(twin, traced):
    """track(collect_cycles=True): each step's pair is freed by the tracker's
    own collection at the next mark, after a walk of the garbage: check
    reports every one under the cycle rule, named by its cycle (all but the
    last step's pair, which the program's own final gc.collect() frees
    unwalked); the twin without the cycle (weak peers) is clean."""
    info = traced("cycle", twin, "collect")
    rc, rep = _check(info["snap"])
    if twin == "fixed":
        assert rc == 0 and rep["findings"] == [], rep["findings"]
        return
    expect = {int(a, 16): n for a, n in info["expect"].items()}
    found = {int(f["addr"], 16): f for f in rep["findings"]}
    assert rc == 1 and expect and set(found) == set(expect), (sorted(found), sorted(expect))
    for addr, f in found.items():
        assert f["rule"] == "cycle" and f["bytes"] == expect[addr], f
        assert f["collected_by_gc"] is not None
    named = [f for f in rep["findings"]
             if any(p["cycle"] and "Peer.peer → Peer.peer → Peer.act" in p["text"]
                    for p in f["paths"])]
    assert len(named) >= len(rep["findings"]) - 2 > 0, [f["paths"] for f in rep["findings"]]


def test_view_path_names_the_view_and_its_base(traced):
    _cli()
    info = traced("view", "leak")
    _, rep = _check(info["snap"])
    f = rep["findings"][0]
    steps = f["paths"][0]["steps"]
    views = [s for s in steps if s["kind"] == "tensor" and s.get("view_of")]
    # named by the line of leak_shapes.py that made it, then the op
    assert views and views[0]["view_of"]["name"].endswith(", aten.cat out[0])"), views
    assert "torch.cat(" in f["owner"]["name"] and "leak_shapes.py:" in f["owner"]["name"]
    assert f["last_use"]["stack"], "uses carry the Python stack"
    # the step is told by the program's own mark label (leak_shapes marks
    # "step i" at the start of step i: the checker's step i+1)
    assert f["last_use"]["mark"] == f"step {f['last_use']['step'] - 1}", f["last_use"]
    assert f["last_use"]["stack"][0]["file"].endswith("leak_shapes.py")


def test_renamed_tensor_finding_shows_the_new_name(traced):
    """name() on a tensor already recorded renames it (vt_tensor_name): the
    finding's owner, the path's view_of and the text use the new name, and
    the snapshot says format 1.1 or later (TENSOR_NAME) with TENSOR_NAME events."""
    cli = _cli()
    info = traced("view", "leak", "rename")
    rc, rep = _check(info["snap"])
    assert rc == 1 and rep["findings"]
    expect = {int(a, 16) for a in info["expect"]}
    found = {int(f["addr"], 16) for f in rep["findings"]}
    assert expect <= found
    for f in rep["findings"]:
        assert f["owner"]["name"] == "gathered buffer", f["owner"]
        views = [s for p in f["paths"] for s in p["steps"] if s.get("view_of")]
        assert views and all(v["view_of"]["name"] == "gathered buffer" for v in views)
        text = " ".join(p["text"] for p in f["paths"])
        assert "aten.cat" not in text, text
    r = subprocess.run([cli, "json", info["snap"]], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    major, minor = map(int, doc["meta"]["format_version"].split("."))
    assert major == 1 and minor >= 1, doc["meta"]["format_version"]   # TENSOR_NAME: 1.1
    assert doc["counts"].get("TENSOR_NAME", 0) >= 5, doc["counts"]


# -- retention inside a step: the opt-in tape rule ----------------------------

def _tape(twin: str, tmp_path, device: str) -> tuple:
    cli = _cli()
    out = str(tmp_path / f"tape-{twin}.vtsnap")
    info = run_traced(os.path.join(HERE, "tape_shape.py"), [twin, out], out, timeout=120,
                      device=device)
    r = subprocess.run([cli, "check", out, "--rules", "linger,pinned,tape"],
                       capture_output=True, text=True, timeout=60)
    j = subprocess.run([cli, "check", out, "--rules", "linger,pinned,tape", "--json"],
                       capture_output=True, text=True, timeout=60)
    auto = subprocess.run([cli, "check", out], capture_output=True, text=True, timeout=60)
    return info, r, json.loads(j.stdout), auto


@pytest.mark.parametrize("device", DEVICES)
def test_tape_keeping_every_intermediate_is_retention_inside_its_step(device, tmp_path):
    """A hand-written tape cleared only at the end of the step: the
    activations whose backward already ran are still alive at the step's
    peak (the stacked gradients). No mark sees them (each step frees them
    all), so only the tape rule, which is asked for, reports them."""
    info, text, rep, auto = _tape("leak", tmp_path, device)
    assert text.returncode == 1, text.stderr
    assert rep["findings"] and all(f["rule"] == "tape" for f in rep["findings"])
    # at least one activation per complete step, never the weight or a batch
    steps = {f["last_use"]["step"] for f in rep["findings"]}
    assert len(steps) >= info["steps"] - 1, sorted(steps)
    for f in rep["findings"]:
        assert f["bytes"] == info["activation_bytes"], f
        assert "a = torch.tanh(a @ w) (tape_shape.py:" in f["owner"]["name"], f["owner"]
        assert f["lingering_from"]["seq"] < f["freed"]["seq"]
        assert f["step"]["peak_bytes"] > 0 and 25 <= f["step"]["idle_pct"] <= 100
    assert "retained inside its step: alive " in text.stdout
    assert "through the step's peak of " in text.stdout
    assert auto.returncode == 0 and auto.stdout.startswith("vramtrace check: 0 findings")


@pytest.mark.parametrize("device", DEVICES)
def test_tape_freeing_each_entry_after_its_backward_is_clean(device, tmp_path):
    _, text, rep, _ = _tape("fixed", tmp_path, device)
    assert rep["findings"] == [], text.stdout[:3000]
    assert text.returncode == 0 and rep["tensors"] > 0 and rep["marks"] >= 6


def _leak_and_clean_twin(script: str, tmp_path) -> tuple:
    """Run ``script leak|fixed OUT`` (a program that writes its own snapshot),
    assert the fixed twin comes out clean; the leak's (exit status, report)."""
    reps = {}
    for kind in ("leak", "fixed"):
        out = str(tmp_path / f"{kind}.vtsnap")
        run_traced(os.path.join(HERE, script), [kind, out], out, timeout=120)
        reps[kind] = _check(out)
    rc, rep = reps["fixed"]
    assert rc == 0 and rep["findings"] == [], rep["findings"][:3]
    return reps["leak"]


def test_a_running_total_that_keeps_every_steps_graph_is_named_as_the_holder(tmp_path):
    """``running = running + loss`` keeps each step's graph through the
    total's grad_fn. Every activation is named held by the total (and the
    frame local that holds it), not by its own subgraph: the autograd search
    walks each graph from its top (the newest tensors first) and, at the
    snapshot, for as long as the walk's time allows rather than 2,048 steps
    (the graph kept here is larger). Before: 'held by: tensor loss.grad_fn'.
    The sigmoid's output, kept by its node's saved tensor alone after its
    Python object died, is named too (a tensor standing for the saved one);
    before, it had no holder. The fixed twin (``loss.item()``) is clean."""
    rc, rep = _leak_and_clean_twin("running_total.py", tmp_path)
    assert rc == 1 and len(rep["findings"]) > 500, len(rep["findings"])
    total = f"running = running + loss (running_total.py:{line_of(os.path.join(HERE, 'running_total.py'), '# RUNNING_LINE')}"
    unnamed = [f for f in rep["findings"]
               if not any("frame local 'running'" in p["text"] and total in p["text"]
                          for p in f["paths"])]
    assert not unnamed, (len(unnamed), [p["text"] for p in unnamed[0]["paths"]])


def test_a_logged_gradient_penalty_names_the_list_for_the_inputs_its_graph_keeps(tmp_path):
    """WGAN-GP, ``history.append(gp)``: the penalty's graph keeps ``mix``
    through the gradient accumulator of that leaf (``AccumulateGrad.variable``,
    from C++), and ``mix.grad``. Every finding is held by the list, through
    the penalty's graph. Before: ``mix`` had no holder and its gradient was
    named held by ``mix`` (two causes more). The fixed twin is clean."""
    rc, rep = _leak_and_clean_twin("gradient_penalty.py", tmp_path)
    assert rc == 1 and rep["findings"], rep
    owners = [f["owner"]["name"] for f in rep["findings"]]
    assert any(o.startswith("mix = (eps * real") for o in owners), owners
    unnamed = [f for f in rep["findings"]
               if not any(p["text"].startswith("frame local 'history'") and
                          "AccumulateGrad.variable" in p["text"] or
                          p["text"].startswith("frame local 'history'") and
                          "tensor 'gp = " in p["text"] for p in f["paths"])]
    assert not unnamed, (len(unnamed), [p["text"] for p in unnamed[0]["paths"]])
    assert len(rep["groups"]) == 1, rep["groups"]
