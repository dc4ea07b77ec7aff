"""Cost of recording a stack with Python frames, vramtrace against PyTorch.

One workload: at a Python depth of 30 (a chain of Python calls), a loop
allocates and frees a 1 MiB tensor on the simulated device. Each
configuration runs in its own process under simrun; the recording cost per
allocation/free pair (both stacks recorded) is the loop's time minus the
same loop's time without recording, in the same way (each process keeps the
best of 5 loops, each configuration the best of 3 processes, interleaved):

  torch python    caching allocator, _record_memory_history(stacks="python")
  torch all       ... stacks="all" (Python, TorchScript and C++ frames)
  torch off       caching allocator, no history (torch's baseline)
  vramtrace all   vramtrace run, PYTORCH_NO_CUDA_MEMORY_CACHING=1,
                  stacks:all,stack_depth:32 (native 32 + Python frames)
  vramtrace python  ... stacks:python
  vramtrace off   ... trace:0 (vramtrace's baseline)

    simrun -- python bench_pystacks.py [--iters N]   (VRAMTRACE_CLI, torch)

Prints a table and one RESULT line (vramtrace all / torch all, and python /
python); the goal is at most 0.5. Asserts nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
DEPTH = 30
ROUNDS = 3


def child(kind: str, stacks: str, iters: int) -> None:
    import torch
    torch.cuda.init()
    if kind == "torch" and stacks != "off":
        torch.cuda.memory._record_memory_history(max_entries=1 << 20, stacks=stacks)

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(iters):
            t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
            del t
        return time.perf_counter() - t0

    def nest(d: int) -> float:
        return loop() if d <= 1 else nest(d - 1)

    nest(DEPTH)                                   # warm-up: first stacks, caches
    best = min(nest(DEPTH) for _ in range(5))
    print(json.dumps({"per_pair_us": best / iters * 1e6}))


def measure(kind: str, stacks: str, iters: int, tmp: str) -> float:
    cmd = [sys.executable, HERE, "--child", kind, stacks, str(iters)]
    env = dict(os.environ)
    if kind == "vramtrace":
        conf = {"off": "trace:0", "all": "stacks:all,stack_depth:32",
                "python": "stacks:python,stack_depth:32"}[stacks]
        snap = os.path.join(tmp, f"{stacks}.vtsnap")   # written at exit, untimed
        cmd = [os.environ["VRAMTRACE_CLI"], "run", "-o", snap, "--conf", conf, "--"] + cmd
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"{cmd} failed:\n{out.stderr[-3000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)["per_pair_us"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 300
    # Rounds interleave the configurations, and each keeps its best round:
    # other work on a shared machine only ever adds time.
    t = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ROUNDS):
            for k in ("torch", "vramtrace"):
                for s in ("off", "python", "all"):
                    us = measure(k, s, iters, tmp)
                    t[(k, s)] = min(t.get((k, s), us), us)
    print(f"Python depth {DEPTH}, native depth 32 (vramtrace), {iters} alloc/free pairs, "
          f"best of {ROUNDS}x5; us per pair")
    print(f"{'':12s} {'no record':>10s} {'python':>10s} {'all':>10s} "
          f"{'cost python':>12s} {'cost all':>10s}")
    cost = {}
    for k in ("torch", "vramtrace"):
        cost[k] = {s: t[(k, s)] - t[(k, "off")] for s in ("python", "all")}
        print(f"{k:12s} {t[(k, 'off')]:10.2f} {t[(k, 'python')]:10.2f} {t[(k, 'all')]:10.2f} "
              f"{cost[k]['python']:12.2f} {cost[k]['all']:10.2f}")
    ra = cost["vramtrace"]["all"] / cost["torch"]["all"] if cost["torch"]["all"] > 0 else 0
    rp = (cost["vramtrace"]["python"] / cost["torch"]["python"]
          if cost["torch"]["python"] > 0 else 0)
    print(f"RESULT pystacks: recording cost per alloc/free pair, vramtrace / PyTorch: "
          f"stacks=all {ra:.2f}, stacks=python {rp:.2f} (goal <= 0.5)")


if __name__ == "__main__":
    main()
