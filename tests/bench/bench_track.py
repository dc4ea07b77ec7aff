"""Cost of vramtrace.torch.track() on a CPU training loop.

Runs each configuration in its own process (one trace per process):
an MLP training loop, clean and leaking (a list keeps each step's
activation), untracked and under track() with a mark per iteration; prints
ms per iteration, the ratio tracked/untracked, the walks the tracker made
and cut off, and the snapshot size, then one RESULT line.

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
    if mode == "untracked":
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        dt = time.perf_counter() - t0
    else:
        import vramtrace
        import vramtrace.torch as vtt
        with vtt.track() as tr:
            t0 = time.perf_counter()
            for i in range(steps):
                vtt.mark(f"iteration {i}")
                step(i)
            dt = time.perf_counter() - t0
            vramtrace.snapshot(snap)
        stats = {"walks": tr.walks, "cutoffs": tr.walk_cutoffs,
                 "postponed": tr.walks_postponed, "mark_s": round(tr.walk_seconds, 3),
                 "snap_bytes": os.path.getsize(snap)}
    print(json.dumps({"ms": dt * 1e3 / steps, **stats}))


def run(mode: str, leak: bool, steps: int, snap: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, __file__, "--child", mode, "leak" if leak else "clean",
                        str(steps), snap], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"bench_track: {mode} {'leak' if leak else 'clean'} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3] == "leak", int(sys.argv[4]), sys.argv[5])
        return
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 60
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench_track: SKIP (no torch in this Python)")
        sys.exit(77)
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'loop':<8}{'untracked ms/it':>17}{'tracked ms/it':>15}{'ratio':>8}"
              f"{'walks':>7}{'cut off':>9}{'snapshot':>12}")
        for leak in (False, True):
            name = "leaking" if leak else "clean"
            snap = os.path.join(tmp, f"{name}.vtsnap")
            base = run("untracked", leak, steps, snap)
            tr = run("tracked", leak, steps, snap)
            ratio = tr["ms"] / base["ms"]
            res[name] = ratio
            print(f"{name:<8}{base['ms']:>17.2f}{tr['ms']:>15.2f}{ratio:>7.2f}x"
                  f"{tr['walks']:>7}{tr['cutoffs']:>9}{tr['snap_bytes'] / 1024:>9.0f} KiB")
    print(f"RESULT steps={steps} clean_ratio={res['clean']:.2f} leaking_ratio={res['leaking']:.2f} "
          f"targets: clean<=1.5 leaking<=3.0")


if __name__ == "__main__":
    main()
