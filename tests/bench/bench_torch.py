"""bench_torch: what memory recording costs a real PyTorch training loop.

One MLP training loop (tests/torch/mlp.py: Linear/ReLU/LayerNorm, AdamW) on
the simulated device, one process per variant:

  plain        PyTorch's caching allocator, nothing recorded
  observed     the same program under `vramtrace run` (PyTorch's allocator
               observed block by block, every block with its native and
               Python stack; the program unchanged)
  observed_py  the same with VRAMTRACE_CONF=stacks:python (Python frames
               only): what native unwinding costs (only when asked for,
               --variants)
  python       + torch.cuda.memory._record_memory_history(stacks="python")
  all          + _record_memory_history(stacks="all") (C++ frames too)
  vramtrace    vramtrace.torch.use_allocator(), tracing on (the default)

For each: ms per step (median of the timed steps; the fastest of --rounds
processes, variants interleaved; relative to plain), and
for the recorders the snapshot's bytes and the seconds to write it
(torch.cuda.memory._dump_snapshot / vramtrace.snapshot; `observed` writes
its snapshot at exit, as `vramtrace run -o` does, not timed here). The
RESULT line also gives what `observed` adds per step as a share of what
PyTorch's python recorder adds (observed_share_of_python from the fastest
rounds, observed_share_of_python_paired from the paired ratios), and each
variant's median over rounds of its ratio to the same round's plain loop
(observed_paired_x, python_paired_x): steadier than the fastest rounds on a
busy machine; and the fastest tenth of each variant's steps in its best process
against plain's (observed_p10_x, ...): the simulator's stream threads move a
process between a fast and a slow regime, and this compares the fast one; and
the process's CPU time per step (all its threads), paired as above
(observed_paired_cpu_x, python_paired_cpu_x, observed_share_of_python_cpu):
the work a recorder adds, however the threads were scheduled. Device code does
not run on the simulated device, so a step's time is the host's work:
PyTorch's dispatch, the allocator and the recorder, which is what a
recorder adds to. Ends with a RESULT line.

With --pin every process runs on one CPU (the last this one may use). On
the simulator a step hands work between the program's thread, the autograd
engine's and the simulator's stream thread; pinned, the hand-overs are
context switches on one CPU (a third of its time in the kernel), which
steadies the plain loop between processes (p10 0.85-0.96 ms over six
processes, 0.85-1.75 unpinned, on a loaded two-CPU machine) but is not how
a program runs: the default leaves the threads to the scheduler.

  simrun -- python tests/bench/bench_torch.py [--steps N] [--rounds N] [--variants plain,...] [--pin]
  (meson test -C build --benchmark bench_torch -v)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))

VARIANTS = ["plain", "observed", "python", "all", "vramtrace"]
ALL_VARIANTS = VARIANTS + ["observed_py"]   # observed_py: only when asked for
WARMUP = 5


def worker(variant: str, steps: int, out: str, snap: str, pin: int) -> None:
    if pin >= 0:
        # before torch and the simulator start their threads: they inherit it
        os.sched_setaffinity(0, {pin})
    import torch
    import mlp
    torch.backends.cudnn.enabled = False
    if variant == "vramtrace":
        import vramtrace
        import vramtrace.torch as vtt
        vtt.use_allocator()
    model = mlp.make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mlp.train(model, opt, WARMUP)
    torch.cuda.synchronize()
    if variant in ("python", "all"):
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks=variant)
    times, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        mlp.train(model, opt, 1)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    res = {"variant": variant, "ms_per_step": statistics.median(times) * 1e3,
           # the CPU time of all the process's threads (the program's, the
           # autograd engine's, the simulator's stream thread, vramtrace's)
           "cpu_ms": statistics.median(cpu) * 1e3,
           # the fastest tenth of the steps: the simulator's stream threads
           # move a process between a fast and a slow regime; this is the
           # fast one, which every variant reaches
           "p10_ms": sorted(times)[len(times) // 10] * 1e3,
           "snapshot_bytes": 0, "dump_s": 0.0}
    if variant not in ("plain", "observed", "observed_py"):
        t0 = time.perf_counter()
        if variant == "vramtrace":
            vramtrace.snapshot(snap)
        else:
            torch.cuda.memory._dump_snapshot(snap)
        res["dump_s"] = time.perf_counter() - t0
        res["snapshot_bytes"] = os.path.getsize(snap)
    with open(out, "w") as f:
        json.dump(res, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    # Many short rounds: a process's step time differs from the next one's by
    # more than a recorder costs (memory layout, the machine), and the median
    # of paired ratios over 11 rounds settles where 3 long rounds did not.
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated, plain among them (default: all)")
    ap.add_argument("--worker", choices=ALL_VARIANTS)
    ap.add_argument("--out", default="")
    ap.add_argument("--snapshot", default="")
    ap.add_argument("--pin", action="store_true",
                    help="run every process on one CPU (the last this one may use)")
    ap.add_argument("--pin-cpu", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.out, args.snapshot, args.pin_cpu)
        return
    pin = max(os.sched_getaffinity(0)) if args.pin else -1
    variants = [v for v in ALL_VARIANTS if v in args.variants.split(",")]
    if "plain" not in variants or len(variants) != len(args.variants.split(",")):
        ap.error(f"--variants: plain and some of {', '.join(ALL_VARIANTS)}")
    results: dict = {}
    rounds: dict = {}   # variant -> ms/step of each round
    per_round: dict = {}   # variant -> each round's worker result
    with tempfile.TemporaryDirectory() as tmp:
        # Rounds, each running every variant once in turn, the fastest round
        # of each kept: a loaded machine slows some runs, never speeds one up.
        for _round, v in [(r, v) for r in range(args.rounds) for v in variants]:
            out = os.path.join(tmp, v + ".json")
            snap = os.path.join(tmp, v + (".vtsnap" if v == "vramtrace" else ".pickle"))
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", v,
                   "--steps", str(args.steps), "--out", out, "--snapshot", snap,
                   "--pin-cpu", str(pin)]
            env = None
            if v in ("observed", "observed_py"):
                cmd = [os.environ["VRAMTRACE_CLI"], "run", "-o", snap, "--"] + cmd
            if v == "observed_py":
                conf = os.environ.get("VRAMTRACE_CONF", "")
                env = dict(os.environ, VRAMTRACE_CONF=(conf + "," if conf else "") + "stacks:python")
            subprocess.run(cmd, check=True, env=env)
            with open(out) as f:
                res = json.load(f)
            if v in ("observed", "observed_py"):
                res["snapshot_bytes"] = os.path.getsize(snap)
            rounds.setdefault(v, []).append(res["ms_per_step"])
            per_round.setdefault(v, []).append(res)
            if v not in results or res["ms_per_step"] < results[v]["ms_per_step"]:
                results[v] = res
    base = results["plain"]["ms_per_step"]
    print(f"bench_torch: MLP {args.steps} timed steps after {WARMUP} warm-up, one process per "
          f"variant, the fastest of {args.rounds} rounds, "
          + (f"each process on CPU {pin}" if pin >= 0 else "processes not pinned"))
    print(f"{'variant':<10} {'ms/step':>9} {'vs plain':>9} {'snapshot':>12} {'dump s':>8}")
    for v in variants:
        r = results[v]
        snap = f"{r['snapshot_bytes']:,}" if r["snapshot_bytes"] else "-"
        dump = f"{r['dump_s']:.3f}" if r["dump_s"] else "-"
        print(f"{v:<10} {r['ms_per_step']:>9.2f} {r['ms_per_step'] / base:>8.2f}x {snap:>12} {dump:>8}")
    # Each round's variant against the same round's plain loop, the median of
    # those ratios: a machine that slows down for a while slows both.
    paired = {v: statistics.median(r / p for r, p in zip(rounds[v], rounds["plain"]))
              for v in variants}
    print("median of per-round ratios to plain: " +
          ", ".join(f"{v} {paired[v]:.3f}x" for v in variants if v != "plain"))
    # The fastest tenth of each process's steps, the best process of each variant.
    p10 = {v: min(r["p10_ms"] for r in per_round[v]) for v in variants}
    print("fastest tenth of the steps: " + ", ".join(
        f"{v} {p10[v]:.3f} ms ({p10[v] / p10['plain']:.3f}x)" for v in variants))
    # Both at once, the steadiest on a shared machine: each round's fastest
    # tenth against the same round's plain loop's, the median over rounds.
    paired_p10 = {v: statistics.median(r["p10_ms"] / p["p10_ms"]
                                       for r, p in zip(per_round[v], per_round["plain"]))
                  for v in variants}
    print("median of per-round ratios of the fastest tenths: " + ", ".join(
        f"{v} {paired_p10[v]:.3f}x" for v in variants if v != "plain"))
    # The process's CPU time per step (all its threads), each round against
    # the same round's plain loop: what the recorder costs in work, whichever
    # way the threads were scheduled (the wall clock's regimes above).
    paired_cpu = {v: statistics.median(r["cpu_ms"] / p["cpu_ms"]
                                       for r, p in zip(per_round[v], per_round["plain"]))
                  for v in variants}
    print("CPU time per step (all the process's threads), median of per-round ratios: " +
          ", ".join(f"{v} {paired_cpu[v]:.3f}x" for v in variants if v != "plain") +
          " (plain %.3f ms)" % statistics.median(r["cpu_ms"] for r in per_round["plain"]))
    cpu_share = (paired_cpu["observed"] - 1) / (paired_cpu["python"] - 1) \
        if "observed" in paired_cpu and paired_cpu.get("python", 1) > 1 else float("nan")
    # What observing adds per step as a share of what PyTorch's python-only
    # recorder adds, from the paired ratios (the same rounds' plain loops).
    paired_share = (paired["observed"] - 1) / (paired["python"] - 1) \
        if "observed" in paired and paired.get("python", 1) > 1 else float("nan")
    if variants != VARIANTS:   # a subset (scripts/gpu-check --dry-run): the figures it has
        print("RESULT ms_step_plain=%.2f " % base + " ".join(
            "%s_x=%.3f %s_paired_x=%.3f %s_p10_x=%.3f %s_paired_p10_x=%.3f "
            "%s_paired_cpu_x=%.3f" % (
                v, results[v]["ms_per_step"] / base, v, paired[v], v, p10[v] / p10["plain"],
                v, paired_p10[v], v, paired_cpu[v])
            for v in variants if v != "plain") +
            (" observed_share_of_python_paired=%.2f" % paired_share
             if paired_share == paired_share else "") +
            (" observed_share_of_python_cpu=%.2f" % cpu_share
             if cpu_share == cpu_share else ""))
        return
    added = {v: results[v]["ms_per_step"] - base for v in VARIANTS}
    share = added["observed"] / added["python"] if added["python"] > 0 else float("nan")
    print(f"observed adds {added['observed']:.3f} ms/step, python's recorder "
          f"{added['python']:.3f} ms/step: {share:.2f} of it")
    print("RESULT ms_step_plain=%.2f observed_x=%.3f python_x=%.2f all_x=%.2f vramtrace_x=%.2f "
          "observed_paired_x=%.3f python_paired_x=%.3f "
          "observed_p10_x=%.3f python_p10_x=%.3f "
          "observed_paired_p10_x=%.3f python_paired_p10_x=%.3f "
          "observed_share_of_python=%.2f observed_share_of_python_paired=%.2f "
          "observed_paired_cpu_x=%.3f python_paired_cpu_x=%.3f observed_share_of_python_cpu=%.2f "
          "bytes_observed=%d bytes_python=%d bytes_all=%d bytes_vramtrace=%d "
          "dump_s_python=%.3f dump_s_all=%.3f dump_s_vramtrace=%.3f" % (
              base, results["observed"]["ms_per_step"] / base,
              results["python"]["ms_per_step"] / base, results["all"]["ms_per_step"] / base,
              results["vramtrace"]["ms_per_step"] / base,
              paired["observed"], paired["python"],
              p10["observed"] / p10["plain"], p10["python"] / p10["plain"],
              paired_p10["observed"], paired_p10["python"], share, paired_share,
              paired_cpu["observed"], paired_cpu["python"], cpu_share,
              results["observed"]["snapshot_bytes"],
              results["python"]["snapshot_bytes"], results["all"]["snapshot_bytes"],
              results["vramtrace"]["snapshot_bytes"], results["python"]["dump_s"],
              results["all"]["dump_s"], results["vramtrace"]["dump_s"]))


if __name__ == "__main__":
    main()
