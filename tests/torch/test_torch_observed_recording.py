"""`vramtrace run -- python train.py` on a program that never imports
vramtrace: PyTorch's own caching allocator is observed, not replaced
(vramtrace/_autorun.py, native/pool_observer.cpp). What stays as without
vramtrace, and what the recording holds: PyTorch's figures and its own
recorder unchanged, and vramtrace's allocated curve and blocks agreeing
with them (whole blocks, expandable segments, a CUDA graph's pool, two
devices, a thread); every rank of a torchrun job observed, one signal to
the launcher dumping each rank, a program ending with os._exit()
snapshotted; the bootstrap leaving a program as it was; a run whose
observer cannot be built, or whose program brings its own allocator, said
so. Each case runs its programs (train_leak.py and others) in their own
processes on the simulated device; this driver never imports torch.
Findings: test_torch_observed_leaks.py; `run --track`:
test_torch_observed_track.py.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from observed_helpers import CLI, HERE, SIMRUN, figures, snapshot_json, train
from procs import run


def printed(out: str, name: str) -> int:
    m = re.search(rf"^{name} (\d+)$", out, re.M)
    assert m, out[-3000:]
    return int(m.group(1))


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
    # leaks: the pinned batches are PyTorch's host cache's blocks, listed apart
    # from the program's own; the ones the DataLoader's pin-memory thread made
    # are named by its Python lines, not by the C++ frames inside them
    rc, text = run([CLI, "leaks", snap])
    assert rc == 0, text[-3000:]
    program, cache = text.split("PyTorch's pinned host memory cache, its blocks kept for reuse")
    assert "(pinned host)" not in program, program[:3000]
    pinned = cache.split("The libraries' own handles")[0]
    thread = next((g for g in pinned.split("Leak of ")[1:] if "_pin_memory_loop" in g), "")
    assert re.search(r"\n    #\d+ pin_memory \S+/pin_memory\.py:\d+", thread), pinned
    assert " 0x" not in thread and "native frames under them hidden" in thread, thread


def test_every_rank_of_a_torchrun_job_is_observed(tmp_path):
    """`vramtrace run -- torchrun ...`: the launcher starts the ranks with the
    bootstrap on PYTHONPATH; each rank's snapshot holds its own blocks and
    optimizer steps."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    rc, out = run([SIMRUN, "--devices", "2", "--mem", "1G", "--", CLI, "run", "-o",
                   str(tmp_path / "rank%r.vtsnap"), "--", torchrun, "--standalone",
                   "--log-dir", str(tmp_path / "torchrun-logs"),
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
           "--log-dir", str(tmp_path / "torchrun-logs"),
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
