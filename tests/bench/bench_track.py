"""Cost of vramtrace.torch.track() on a CPU training loop.

Runs each configuration in its own process (one trace per process):
an MLP training loop, clean and leaking (a list keeps each step's
activation), untracked, under a dispatch mode that does nothing but run the
op (the floor of any per-op recorder in Python), and under track() with a
mark per iteration; prints ms per iteration, the ratio tracked/untracked,
the walks the tracker made, cut off and skipped, and the snapshot size, then
one RESULT line.

Times are the process's CPU time (torch runs on one thread; vramtrace adds
none), the median of --runs processes (default 3), so that other jobs on a
shared machine change them little; wall-clock medians are printed too.

    python bench_track.py [--steps N]      (needs torch and VRAMTRACE_LIB)

The issue's targets: a leaking run at most 3x untracked, a clean one at
most 1.5x. This prints what it measures; it asserts nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")


def child(mode: str, leak: bool, steps: int, snap: str) -> None:
    sys.path.insert(0, SCRIPTS)
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    batches = [torch.randn(64, 256) for _ in range(4)]   # reused every 4 steps

    def step(i: int) -> None:
        x = batches[i % 4]
        h = model[1](model[0](x))
        loss = model[4](model[3](model[2](h))).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if leak:
            kept.append(h.detach())   # the leak: one 128 KiB activation per step

    for i in range(5):   # warm-up, untimed
        step(i)
    stats = {}
    if mode in ("untracked", "dispatch"):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Passthrough(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        mode_cm = Passthrough() if mode == "dispatch" else None
        if mode_cm is not None:
            mode_cm.__enter__()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(i)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if mode_cm is not None:
            mode_cm.__exit__(None, None, None)
    else:
        import vramtrace
        import vramtrace.torch as vtt
        with vtt.track() as tr:
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(steps):
                vtt.mark(f"iteration {i}")
                step(i)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            vramtrace.snapshot(snap)
        stats = {"walks": tr.walks, "cutoffs": tr.walk_cutoffs,
                 "skipped": getattr(tr, "walks_skipped", 0),
                 "postponed": tr.walks_postponed, "mark_s": round(tr.walk_seconds, 3),
                 "snap_bytes": os.path.getsize(snap)}
    print(json.dumps({"ms": dc * 1e3 / steps, "wall_ms": dt * 1e3 / steps, **stats}))


def run(mode: str, leak: bool, steps: int, snap: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, __file__, "--child", mode, "leak" if leak else "clean",
                        str(steps), snap], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"bench_track: {mode} {'leak' if leak else 'clean'} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median_run(mode: str, leak: bool, steps: int, snap: str, runs: int) -> dict:
    """The run with the median CPU ms/it of ``runs`` processes, with the
    median wall ms/it."""
    got = sorted((run(mode, leak, steps, snap) for _ in range(runs)), key=lambda r: r["ms"])
    mid = dict(got[len(got) // 2])
    mid["wall_ms"] = sorted(r["wall_ms"] for r in got)[len(got) // 2]
    mid["range"] = (got[0]["ms"], got[-1]["ms"])
    return mid


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3] == "leak", int(sys.argv[4]), sys.argv[5])
        return
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 60
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench_track: SKIP (no torch in this Python)")
        sys.exit(77)
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"CPU ms per iteration, median of {runs} processes (min-max); wall ms medians after /")
        print(f"{'loop':<8}{'untracked':>28}{'null dispatch':>28}{'tracked':>28}{'ratio':>8}"
              f"{'floor':>7}{'walks':>7}{'cut':>5}{'skip':>6}{'snapshot':>10}")
        for leak in (False, True):
            name = "leaking" if leak else "clean"
            snap = os.path.join(tmp, f"{name}.vtsnap")
            base = median_run("untracked", leak, steps, snap, runs)
            floor = median_run("dispatch", leak, steps, snap, runs)
            tr = median_run("tracked", leak, steps, snap, runs)
            ratio = tr["ms"] / base["ms"]
            res[name] = (ratio, floor["ms"] / base["ms"])

            def cell(r: dict) -> str:
                return f"{r['ms']:.2f} ({r['range'][0]:.2f}-{r['range'][1]:.2f}) / {r['wall_ms']:.1f}"
            print(f"{name:<8}{cell(base):>28}{cell(floor):>28}{cell(tr):>28}{ratio:>7.2f}x"
                  f"{res[name][1]:>6.2f}x{tr['walks']:>7}{tr['cutoffs']:>5}{tr['skipped']:>6}"
                  f"{tr['snap_bytes'] / 1024:>6.0f} KiB")
    print(f"RESULT steps={steps} runs={runs} clean_ratio={res['clean'][0]:.2f} "
          f"leaking_ratio={res['leaking'][0]:.2f} dispatch_floor_clean={res['clean'][1]:.2f} "
          f"dispatch_floor_leaking={res['leaking'][1]:.2f} targets: clean<=1.5 leaking<=3.0")

if __name__ == "__main__":
    main()
