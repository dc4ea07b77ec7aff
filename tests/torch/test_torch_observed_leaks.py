"""`vramtrace run -- python train.py` on a program that never imports
vramtrace, PyTorch's caching allocator observed (vramtrace/_autorun.py,
native/pool_observer.cpp): what plain `run`'s views say of the leaks.
`check` flags the line of the script that made what a loop keeps (its fixed
twin clean), also past a ring the run overran and for a leak that ended
before the window; what the program held at its end counts; `leaks` leads
with the program's lines, the libraries' workspaces last; no view shows a
mangled C++ name; a library installed with pip --target is not taken for the
program's code; results kept on purpose are minor (here also under
--track, the same program's report both ways); an evaluation without marks
is judged by time. Each case runs its programs (train_leak.py and others)
in their own processes on the simulated device (a run that several cases
only read is made once, by a module fixture); this driver never imports
torch. What stays as without vramtrace: test_torch_observed_recording.py;
the holders `run --track` names: test_torch_observed_track.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Dict, Tuple

import pytest

from observed_helpers import CLI, HERE, LOGITS_LINE, SCRIPT, SIMRUN, figures, snapshot_json, train
from procs import run


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
    # (each in a block of 512 B: what the floor weighs)
    assert rc == 0 and re.search(r"1 minor finding \(44 B in 5\.5 KiB of blocks from 1 cause\).*\n.*"
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


def _checked_twins(tmp_path, prog: str, track: bool, says: str,
                   args: Tuple[str, ...] = ()) -> Dict[str, tuple]:
    """PROG fixed and PROG leak (then ARGS) under `vramtrace run` (--track
    when `track`), each printing `says`: {kind: (its snapshot, check's (rc,
    report))}."""
    got = {}
    for kind in ("fixed", "leak"):
        snap = str(tmp_path / f"{kind}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *(["--track"] if track else []),
                       "-o", snap, "--", sys.executable, prog, kind, *args])
        assert rc == 0 and says in out, out[-3000:]
        got[kind] = (snap, run([CLI, "check", snap]))
    return got


@pytest.mark.parametrize("track", [False, True], ids=["run", "run-track"])
def test_results_kept_on_purpose_are_minor_and_a_kept_graph_is_not(track, tmp_path):
    """An unmodified loop keeps each step's detached loss and accuracy (a few
    bytes a step, on purpose): `check` passes, saying in one line that those
    causes are minor (under 0.1 % of the peak), and `--min-bytes 0` still
    counts them. Its twin keeps the losses with their graphs: `check` fails
    at the model's line (under --track, held by the list). Before: the fixed twin failed on both paths
    ("2 findings, 232 B": growth 4 B a step)."""
    reports = _checked_twins(tmp_path, KEPT_RESULTS, track, "steps 30, mean loss")
    snap, (rc, text) = reports["fixed"]
    assert rc == 0, text[:4000]
    assert "vramtrace check: 0 findings" in text, text[:4000]
    minor = re.search(r"(\d+) minor findings? \(.* from (\d+) causes?\) under the floor of ", text)
    assert minor and "(--min-bytes 0 counts them)" in text, text[:4000]
    # the losses' cause: where they were made (the loss's line)
    assert f"kept_results.py:{LOSS_LINE_KEPT}" in text.split("\n", 4)[4], text[:4000]
    if track:   # and under --track, what keeps a minor cause's tensors, in a line of its own
        assert re.search(r"\n    \[linger\] \d+ B in [\d.]+ KiB of blocks: tensor 'accs\.append\(.*\)'\n"
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


DQN_REPLAY = os.path.join(HERE, "dqn_replay.py")


def test_a_replay_memory_is_not_memory_never_freed(tmp_path):
    """PyTorch's DQN tutorial keeps its transitions in a deque with a
    capacity: once full, each step's new transition evicts the oldest. In
    the blocks alone (plain run), the transitions alive at the end were
    "never freed, allocated step after step" by their line, though the
    line frees each once enough younger ones came (a window: check_native.c).
    The fixed twin is clean; the leak, keeping every transition in a list
    besides, is found at the line that made them. (Under --track:
    test_torch_observed_track.py.)"""
    reports = _checked_twins(tmp_path, DQN_REPLAY, False, "transitions")
    snap, (rc, text) = reports["fixed"]
    assert rc == 0, text[:4000]
    # its actions move from the random line to the policy's as exploration
    # decays, both evicted at one line: no growth, not even a minor one
    # (before co_freed_grow: "[growth] 240 B" at the policy's line)
    rc, text = run([CLI, "check", snap, "--min-bytes", "0", "--rules", "growth"])
    assert rc == 0 and "[growth]" not in text, text[:4000]
    _, (rc, text) = reports["leak"]
    assert rc == 1, text[:4000]
    assert re.search(r"allocated at observe \(\S*dqn_replay\.py:\d+\)", text), text[:4000]


def test_a_full_replay_memory_in_a_run_longer_than_the_ring_is_clean_under_plain_run(tmp_path):
    """dqn_replay.py's fixed twin under plain run in rings of 2 MiB (113 of
    its 250 steps kept) and 1 MiB (57 steps, shorter than its memory of 64):
    the transitions made before the window are evicted in it by frees whose
    ALLOC is gone. Without their allocation stack the line seemed to hold
    only the window's: growing in the first ("1 finding, 280 KiB"), never
    freed in the second, where the window evicts none of its own ("2
    findings, 520 KiB"). Each free now names its block's allocation stack
    (format 1.12): both are clean. (Under --track, the tracker's
    declarations say where the tensors were made:
    test_torch_observed_track.py.)"""
    for ring in ("2MiB", "1MiB"):
        snap = str(tmp_path / f"wrapped-{ring}.vtsnap")
        rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "--conf", f"ring:{ring}", "-o",
                       snap, "--", sys.executable, DQN_REPLAY, "fixed"])
        assert rc == 0 and "transitions" in out and "the ring is full" in out, out[-3000:]
        rc, text = run([CLI, "check", snap])
        assert "window: the ring overwrote the run's first" in text, text[:4000]
        assert rc == 0, f"ring {ring}:\n{text[:4000]}"


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


STAGEWISE = os.path.join(HERE, "stagewise.py")
OUT_LINE, STAGE2_LINE = (next(i for i, line in enumerate(open(STAGEWISE), 1) if f"# {m}" in line)
                         for m in ("OUT_LINE", "STAGE2_LINE"))


def _stagewise(mode: str, snap: str) -> Tuple[int, str, dict]:
    """stagewise.py MODE under `vramtrace run`: check's exit status and
    report, and the marks the snapshot holds against those the program
    expected."""
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", snap, "--", sys.executable,
                   STAGEWISE, mode, "8"])
    assert rc == 0, out[-3000:]
    expected = int(re.search(r"marks expected (\d+)", out).group(1))
    rc, text = run([CLI, "check", snap])
    labels = [m["label"] for m in snapshot_json(snap)["marks"]]
    assert labels == [f"step {i}" for i in range(1, expected + 1)], (labels, out[-2000:])
    return rc, text, snapshot_json(snap)


def test_a_second_optimizer_training_alone_takes_the_marks_over(tmp_path):
    """Stage-wise training: a second optimizer trains alone while the first
    one lives on. Its steps are marked from its third in a row, so a leak
    of the second stage is found (before: only the first optimizer's steps
    were marked, and the second stage's leak was judged by none: "0
    findings"); the fixed twin is clean."""
    rc, text, _ = _stagewise("leak", str(tmp_path / "leak.vtsnap"))
    assert rc == 1, text
    # the kept outputs, by where the second stage made them
    assert re.search(rf"stagewise.py:{OUT_LINE}\b.*\n.*stagewise.py:{STAGE2_LINE}\)", text), \
        text[:4000]
    rc, text, _ = _stagewise("fixed", str(tmp_path / "fixed.vtsnap"))
    assert rc == 0, text


@pytest.mark.parametrize("mode", ["gan", "gan2"])
def test_optimizers_taking_turns_within_a_step_keep_one_mark_a_step(mode, tmp_path):
    """A GAN's two optimizers (the generator stepping once or twice a
    step): the marks stay the first one's, one a step."""
    _stagewise(mode, str(tmp_path / f"{mode}.vtsnap"))


LOAD_AFTER_TRAINING = os.path.join(HERE, "load_after_training.py")


def test_a_model_loaded_back_after_training_is_not_never_freed(tmp_path):
    """Plain run: after its last optimizer step the program loads its best
    model back (600 tensors to the device at one line) and evaluates, as
    pytorch/examples' word_language_model ends. The load is one call that
    lasts many of the run's usual steps and frees nothing meanwhile: not a
    loop keeping a block per iteration (never-freed in the time after the
    last mark wants frees between a line's allocations, check_native.c).
    Before: "never freed, allocated step after step" at the load's line."""
    snap = str(tmp_path / "load.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", snap, "--", sys.executable,
                   LOAD_AFTER_TRAINING, str(tmp_path / "best.pt")])
    assert rc == 0 and "loaded 600" in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert "never-freed judges them as steps" in text, text[:4000]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


EVAL_KEPT_GRAPH = os.path.join(HERE, "eval_kept_graph.py")
KEPT_GRAPH_LINE = next(i for i, line in enumerate(open(EVAL_KEPT_GRAPH), 1)
                       if "# EVAL_LINE" in line)


def test_an_evaluations_graph_kept_until_the_next_one_is_found_without_tensors(tmp_path):
    """Plain run: an evaluation every 10 steps without no_grad whose result
    keeps each batch's loss as a tensor holds the whole evaluation's graph
    until the next one replaces it (karpathy/ng-video-lecture's gpt.py so
    changed: "0 findings" before). Its blocks come from the evaluation's
    call path, their short-lived siblings from the training step's: an
    outlier of their own, the blocks one step made at the model's lines,
    kept and freed together (trace/check/check_kept_call.c), shown at the
    model's line under the evaluation. The fixed twin is clean."""
    got = _checked_twins(tmp_path, EVAL_KEPT_GRAPH, False, "steps 60")
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    assert re.search(r"kept together: \d+ blocks that one step made at \d+ lines, whose other "
                     r"blocks die within their step, freed together 10 steps later", text), \
        text[:4000]
    assert re.search(rf"\[outlier\][^#]*\n\s+at estimate_loss \(.*eval_kept_graph.py:"
                     rf"{KEPT_GRAPH_LINE}\b", text), text[:4000]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


def test_an_evaluations_graph_kept_by_a_loop_stepped_by_hand_is_named_under_track(tmp_path):
    """`run --track` of the same evaluation kept until the next one, in a
    loop that steps its parameters by hand (`by-hand`: no optimizer step,
    so no mark). The trace is stepped by its backward passes as plain
    run's is (trace/snap/timeline_steps.c), and the tracker does a mark's
    work where each pass's gradients are first read (_Marks._pass_ended):
    the evaluation's tensors linger, held by the module's `val` through
    the graph its result keeps, named for those an evaluation replaced
    too, as the walk at the step that made them findings found them.
    Before: judged by time, against a grace of a second at least, "0
    findings"; with the check's steps alone (no work at the passes) found,
    but only those kept to the end held by anything (the snapshot's walk:
    0 of 100 the others). The fixed twin is clean."""
    got = _checked_twins(tmp_path, EVAL_KEPT_GRAPH, True, "steps 60", ("by-hand",))
    snap, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    assert "marks (the steps its backward passes tell: the program marked no step" in text, \
        text[:4000]
    causes = re.findall(r"\n  \d+ × \[linger\] .*\n\s+tensor '(.*)'(?: and those of .*)?\n"
                        r"\s+held by: (.*)\n", text)
    assert causes, text[:4000]
    assert any(f"(eval_kept_graph.py:{KEPT_GRAPH_LINE})" in made and
               held.startswith("module __main__.val → tensor 'return losses.mean() ")
               and held.endswith(".grad_fn → (the autograd graph it keeps)")
               for made, held in causes), causes
    rep = json.loads(run([CLI, "check", "--json", snap])[1])
    assert rep["steps_inferred"] and rep["marks"] >= 50, {k: rep[k] for k in ("marks",)}
    # a walk at a step is paid from the walks' credit (the program's own
    # time; less under load): 63-65 of 105 named on a quiet machine, 25 with
    # both cores busy besides (as the suite runs two tests at a time: 5 runs
    # of 6, 2026-12-06; a quarter failed it there once); before, 0 of 100
    replaced = [f for f in rep["findings"] if f["freed"]]
    named = [f for f in replaced
             if f["paths"] and f["paths"][0]["text"].startswith("module __main__.val → ")]
    assert replaced and len(named) >= len(replaced) // 8, \
        [f["paths"][:1] for f in replaced[:5]]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


VAL_KEPT_EVERY_STEP = os.path.join(HERE, "val_kept_every_step.py")
VAL_LINE = next(i for i, line in enumerate(open(VAL_KEPT_EVERY_STEP), 1) if "# VAL_LINE" in line)


def test_a_validation_graph_kept_every_step_is_one_cause_named_by_its_call(tmp_path):
    """Plain run: a model of the program's own (several lines of forward,
    as minGPT's model.py) validated at each step's end without no_grad, each
    loss kept in a list: every step's graph stays, never freed at each line
    of forward it saved an activation at. Those lines' other blocks (the
    training step's) die within their step, and the kept ones were all made
    under one call of the program that does not drive the steps: one cause,
    named by the callback's line (check_kept_call.c). Before: a cause per
    line of forward (minGPT's trainer so changed: 15 causes at 15 lines of
    model.py). The fixed twin is clean."""
    got = _checked_twins(tmp_path, VAL_KEPT_EVERY_STEP, False, "validations 30")
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    causes = re.search(r"\n(\d+) findings from (\d+) causes? ", text)
    assert causes and int(causes.group(1)) > 4, text[:4000]
    heads = re.findall(r"\n  \d+ × \[([a-z-]+)\].*\n\s+allocated (?:under|at) (.*)\n", text)
    assert heads and len(heads) == int(causes.group(2)), text[:4000]
    # one cause a rule: what the callback's call kept, named by its line
    assert {rule for rule, _ in heads} <= {"never-freed", "outlier"}, heads
    assert len({rule for rule, _ in heads}) == len(heads), heads
    for _, where in heads:
        assert re.match(rf"on_batch_end \(.*val_kept_every_step\.py:{VAL_LINE}\), at \d+ "
                        r"lines? inside it$", where), heads
    rep = json.loads(run([CLI, "check", "--json", got["leak"][0]])[1])
    assert all(g["under_call"][0]["line"] == VAL_LINE for g in rep["groups"]), rep["groups"]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


FSDP_EVAL_KEPT = os.path.join(HERE, "fsdp_eval_kept.py")
FSDP_EVAL_LINE = next(i for i, line in enumerate(open(FSDP_EVAL_KEPT), 1) if "# EVAL_LINE" in line)


def test_an_fsdp_evaluations_graphs_kept_in_a_functions_list_are_one_cause_named_by_its_call(
        tmp_path):
    """Plain run of fsdp_eval_kept.py (FSDP2's fully_shard, laid out as
    pytorch/examples' FSDP2 example): after each epoch an evaluation without
    no_grad keeps each output, its graph with it, in main()'s list, freed
    when main() returns. The lines of forward that saved an activation grow
    step over step, each a growth finding: the examples' program so changed
    read 9 causes at 9 lines of its model.py. They were made under one call
    of the program that does not drive the steps: the growth at those lines
    is one cause named by that call, as never-freed's is (check_kept_call.c).
    The fixed twin (no_grad, predictions on the host) is clean."""
    got = _checked_twins(tmp_path, FSDP_EVAL_KEPT, False, "kept 9")
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    causes = re.search(r"\n(\d+) findings from (\d+) causes? ", text)
    assert causes, text[:4000]
    growth = re.findall(r"\n  \d+ × \[growth\] .*\n\s+call sites growing step over step, "
                        r"allocated under (.*), at (\d+) lines inside it: ", text)
    assert len(growth) == 1, text[:4000]
    assert re.match(rf"main \(.*fsdp_eval_kept\.py:{FSDP_EVAL_LINE}\)$", growth[0][0]), growth
    assert int(growth[0][1]) >= 4, growth   # the blocks' lines: norms, attention, MLP, head
    # the rest, an outlier of the same call at most (one cause a rule)
    assert int(causes.group(2)) <= 2, text[:4000]
    rep = json.loads(run([CLI, "check", "--json", got["leak"][0]])[1])
    assert all(g["under_call"][0]["function"] == "main" and
               g["under_call"][0]["line"] == FSDP_EVAL_LINE for g in rep["groups"]), rep["groups"]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


VAL_RUNNING_SUM = os.path.join(HERE, "val_running_sum.py")
VAL_CALL = next(i for i, line in enumerate(open(VAL_RUNNING_SUM), 1) if "# VAL_CALL" in line)


@pytest.mark.parametrize("track", [False, True], ids=["run", "run_track"])
def test_a_validation_summing_its_losses_as_tensors_is_found_in_its_blocks(track, tmp_path):
    """Plain run: a validation without no_grad whose losses are summed as a
    tensor keeps every batch's graph until its loop ends (its peak 1.55x
    its fixed twin's here, growing with the batches: the classic out of
    memory in validation). Every block
    dies within its step, short-lived to the other rules: "0 findings"
    before. Blocks freed together, made at the model's lines and the
    batch's over 20 runs of the loop's body: an outlier of their own
    (trace/check/check_loop_kept.c), one a validation, one cause, named by
    the call that ran the loop. Under --track the same, with a tensor kept
    named (its tensors die within their step, which the tensor rules do not
    judge: "0 findings" there too before). The fixed twin is clean."""
    got = _checked_twins(tmp_path, VAL_RUNNING_SUM, track, "steps 40")
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    assert re.search(r"\n4 findings from 1 cause ", text), text[:4000]
    assert re.search(rf"\[outlier\].*\n\s+allocated under <module> \(.*val_running_sum\.py:"
                     rf"{VAL_CALL}\), through a loop inside it", text), text[:4000]
    assert re.search(r"kept through a loop: \d+ blocks made at \d+ lines over 20 runs of its "
                     r"body or more, where each run's would die with it, freed together when it "
                     r"ended", text), text[:4000]
    if track:
        # (never-freed too where the run went on past its last mark a while)
        assert re.search(r"rules: linger,(never-freed,)?outlier,pinned", text), text[:4000]
        assert re.search(r"through a loop inside it: .*\n\s+tensor 'loss = model\(x\)", text), \
            text[:4000]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


EVAL_CAT_PREDS = os.path.join(HERE, "eval_cat_preds.py")


def test_an_evaluation_whose_graphs_one_line_made_are_kept_through_its_loop_is_found(tmp_path):
    """eval_cat_preds.py under `run --track`: an evaluation without no_grad
    that concatenates each batch's output onto a running tensor keeps every
    batch's activations until the caller lets the result go, all made under
    one line of the loop (`out = model(x)`, the batches on the device
    already). Blocks made at one line were not judged a loop's (a loop
    gathering its results on purpose makes them so): "0 findings" before.
    Under track() the uses tell them apart: each batch's blocks were used
    for the last time before the next batch's were made, where gathered
    results are used after the loop (the fixed twin's torch.cat(outs), under
    no_grad: clean). The batches, made before the loop and freed with the
    graphs, are not counted as what it kept."""
    got = _checked_twins(tmp_path, EVAL_CAT_PREDS, True, "evaluated (1280, 10)")
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    line = next(i for i, l in enumerate(open(EVAL_CAT_PREDS), 1) if "# EVAL_LINE" in l)
    # the 20 batches' activations (256 KiB each), and the result, made by the last run
    assert re.search(r"\[outlier\].*, 5(\.0\d)? MiB in 2[01] allocations\n\s+kept through a loop: "
                     r"2[01] blocks made at [12] lines? over 2[01] runs of its body or more", text), \
        text[:4000]
    assert re.search(rf"allocated: .*\n\s+at evaluate \(.*eval_cat_preds\.py:{line}, ", text), \
        text[:4000]
    # the call the loop ran inside: evaluate's, at main's line
    rep = json.loads(run([CLI, "check", "--json", got["leak"][0]])[1])
    call = next(i for i, l in enumerate(open(EVAL_CAT_PREDS), 1) if "# EVAL_CALL" in l)
    assert [(g["under_call"][0]["function"], g["under_call"][0]["line"])
            for g in rep["groups"]] == [("main", call)], rep["groups"]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]


@pytest.mark.parametrize("track", [False, True], ids=["run", "run_track"])
def test_a_loop_stepped_by_hand_is_judged_in_the_steps_its_backward_passes_end(track, tmp_path):
    """The same validation in a loop that steps its parameters by hand (no
    optimizer: `run` marks no step, as on pytorch/examples'
    word_language_model, whose default does so): "0 findings", the step
    rules not run for want of steps, before (under --track too: judged by
    time there). The ends of its backward passes step the trace (said in
    the header): found as with marks, one cause named by the call that ran
    the loop; the fixed twin is clean."""
    got = _checked_twins(tmp_path, VAL_RUNNING_SUM, track, "steps 40", ("by-hand",))
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    # a step ends where the program releases its gradients (model.zero_grad()),
    # from the second step on
    assert ", 39 marks (the steps its backward passes tell: the program marked no step and " \
           "made no optimizer step)," in text, text[:4000]
    assert re.search(r"\n\d+ findings from 1 cause ", text), text[:4000]
    assert re.search(rf"\[outlier\].*\n\s+allocated under <module> \(.*val_running_sum\.py:"
                     rf"{VAL_CALL}\), through a loop inside it", text), text[:4000]
    _, (rc, text) = got["fixed"]
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]
    assert "39 marks (the steps its backward passes tell" in text, text[:4000]


@pytest.mark.parametrize("mode, track", [("", False), ("accumulate", False), ("", True)],
                         ids=["dcgan", "dcgan_accumulating", "dcgan_run_track"])
def test_a_gan_stepped_by_hand_is_clean_in_the_steps_its_backward_passes_tell(mode, track,
                                                                             tmp_path):
    """pytorch/examples' DCGAN loop with its optimizers' steps done by hand
    (dcgan_by_hand.py): three backward passes an iteration, two zero_grads,
    nothing kept past the iteration. Stepped at every pass, its
    discriminator's gradients outlived the generator's passes (28 findings
    in this clean loop); stepped at every release, at its discriminator's
    and its generator's; with the real batch in four micro-batches, at every
    micro-batch (the gradients outlived three). A step is the last pass
    before one zero_grad line's release of the gradients: one an iteration,
    from the second on, and 0 findings; under --track too (its tensors
    judged in those steps, the tracker's mark work done where each pass's
    gradients are first read)."""
    snap = str(tmp_path / "dcgan.vtsnap")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", *(["--track"] if track else []),
                   "-o", snap, "--", sys.executable,
                   os.path.join(HERE, "dcgan_by_hand.py"), *([mode] if mode else [])])
    assert rc == 0 and "iterations 30" in out, out[-3000:]
    rc, text = run([CLI, "check", snap])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]
    assert ", 29 marks (the steps its backward passes tell: " in text, text[:4000]


EVAL_AT_END = os.path.join(HERE, "eval_at_end.py")
EVAL_LINE = next(i for i, line in enumerate(open(EVAL_AT_END), 1) if "# EVAL_LINE" in line)


@pytest.mark.parametrize("track", [False, True], ids=["run", "run_track"])
def test_an_evaluation_after_the_last_step_is_judged_in_steps(track, tmp_path):
    """Training marked step by step, then an evaluation at the program's
    end (no optimizer step: no mark) that keeps every batch's output with
    its graph: the time after the last mark is judged in steps of the
    usual length, and the evaluation's line is named (before: "0
    findings", under plain run and run --track alike), under --track with
    what holds the outputs (the exit's walk takes in what the quiet time
    made: vramtrace/torch/_marks.py); its fixed twin, the
    outputs detached and on the host, is clean."""
    got = _checked_twins(tmp_path, EVAL_AT_END, track, "kept 200")
    _, (rc, text) = got["leak"]
    assert rc == 1, text[:4000]
    assert "never-freed judges them as steps" in text, text[:4000]
    assert re.search(rf"\[never-freed\].*\n.*eval_at_end.py:{EVAL_LINE}\b", text), text[:4000]
    if track:   # and what holds them: the list, through each output's graph
        assert re.search(r"held by: module __main__\.outputs → list\[\*\] → tensor 'out = "
                         r"model\(.*\)'\.grad_fn", text), text[:4000]
    snap, (rc, text) = got["fixed"]
    assert rc == 0, text[:4000]
    if track:
        # The opt-in tape rule on the training steps: what each backward
        # read and its engine thread freed is not retention (before: 18
        # findings, the relu outputs the observer saw last used forward).
        rc, text = run([CLI, "check", snap, "--rules", "tape"])
        assert rc == 0 and "vramtrace check: 0 findings" in text, text[:4000]

