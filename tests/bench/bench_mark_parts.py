"""What each part of a mark's policy costs a tracked step in situ, on the
simulated CUDA device: bench_track.py's small loop under track() with a mark
a step, in one process per part, its steps in alternating blocks of --block
steps with the mark whole and with that part skipped:

  grads      the state of the models followed (each used parameter's .grad
             used and named, the models' buffers used with them:
             _Marks._grads_follow_parameters)
  sweep      the storages and tensors checked against what they are now,
             the bases only views keep (_Storages._sweep)
  walk       the walk's schedule and the stale storages looked up
             (_Walks._walk_stale; a clean loop walks nothing)
  declare    the ring's check for tensors to declare again
             (_Marks._declare_tensors_again)
  policy     all of it: the mark only orders the events (the ops held back
             handed over, the step counted), as bench_track_parts.py's
             "bare marks" row

A part's cost is the median step (the mark and the step after it, the
process's CPU time) of the whole-mark blocks less that of the skipped-part
blocks: what the part costs where it runs, after a step that pushed the
tracker out of the caches, and what the next step pays to refill them.
Alternating within one process, rather than comparing processes, leaves out
what differs between processes (where each one's memory lies), which on a
2-core virtual machine moves a step by 20-40 us between two runs of the same
code: more than most parts cost. The first steps of each block are left
out (the switch's own settling). Skipping a part changes what is recorded
(a measuring device, not a way to run). Prints a table and one RESULT line;
asserts nothing about speed.

    python bench_mark_parts.py [--steps N] [--block N] [--rounds N] [--pin CPU]
                               [--simrun PATH]
        (needs torch and VRAMTRACE_LIB; simrun by --simrun or VRAMTRACE_SIMRUN)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
# part -> the Tracker methods skipped ("policy": the whole mark but its ordering)
PARTS = {"grads": ("_grads_follow_parameters",), "sweep": ("_sweep",),
         "walk": ("_walk_stale",), "declare": ("_declare_tensors_again",), "policy": ()}
SETTLE = 5   # steps of each block left out
sys.path.insert(0, HERE)
from bench_track import skip_without_torch, warm_device_step  # noqa: E402


def child(part: str, steps: int, block: int, pin: int) -> None:
    step = warm_device_step(False, pin)
    import torch
    import vramtrace.torch as vtt
    from vramtrace.torch._tracker import Tracker

    def nothing(*args, **kwargs) -> None:
        return None

    def ordering_only(self, kind: str, arg: str) -> None:
        self._fast.flush()
        if kind in ("mark", "tick"):
            self._fast.epoch += 1
    whole = {name: getattr(Tracker, name) for name in PARTS[part]}
    skipped = {name: nothing for name in PARTS[part]}
    # the mark hook is the tracker's bound _on_mark, taken as track() begins:
    # a stand-in that calls the arm's (the parts are looked up at each call)
    marks = {"whole": Tracker._on_mark,
             "skipped": ordering_only if part == "policy" else Tracker._on_mark}
    arm = "whole"

    def on_mark(self, kind: str, arg: str) -> None:
        marks[arm](self, kind, arg)
    Tracker._on_mark = on_mark
    cpu: dict = {"whole": [], "skipped": []}
    with vtt.track() as tr:
        for i in range(steps):
            arm = "skipped" if (i // block) % 2 else "whole"
            for name, fn in (skipped if arm == "skipped" else whole).items():
                setattr(Tracker, name, fn)
            c0 = time.process_time()
            vtt.mark(f"iteration {i}")
            step(i)
            torch.cuda.synchronize()
            if i % block >= SETTLE and i >= 4 * block:   # the first blocks warm up
                cpu[arm].append(time.process_time() - c0)
        observer = tr._observer is not None
    for name, fn in whole.items():
        setattr(Tracker, name, fn)
    Tracker._on_mark = marks["whole"]
    print(json.dumps({"whole_us": statistics.median(cpu["whole"]) * 1e6,
                      "skipped_us": statistics.median(cpu["skipped"]) * 1e6,
                      "observer": observer}))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--block", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pin", type=int, default=-1, help="run every process on this CPU")
    ap.add_argument("--simrun", default=os.environ.get("VRAMTRACE_SIMRUN"))
    args = ap.parse_args()
    skip_without_torch("bench_mark_parts")
    if not args.simrun:
        print("bench_mark_parts: SKIP (no --simrun or VRAMTRACE_SIMRUN)")
        sys.exit(77)
    if args.block <= SETTLE or args.steps < 10 * args.block:
        sys.exit(f"bench_mark_parts: --block above {SETTLE} and --steps at least 10 blocks")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, env.get("PYTHONPATH", "")])
    env.pop("VRAMTRACE_TRACK_OBSERVER", None)   # as users run it
    got: dict = {p: [] for p in PARTS}
    for _ in range(args.rounds):
        for p in PARTS:
            r = subprocess.run([args.simrun, "--mem", "1G", "--", sys.executable, __file__,
                                "--child", p, str(args.steps), str(args.block), str(args.pin)],
                               env=env, capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                sys.exit(f"bench_mark_parts: {p} failed:\n{r.stderr[-2000:]}")
            res = json.loads(r.stdout.strip().splitlines()[-1])
            if not res["observer"]:
                sys.exit(f"bench_mark_parts: {p} did not use the op observer")
            got[p].append(res)
    print(f"simulated CUDA device, bench_track's small loop under track() with a mark a "
          f"step, {args.steps} steps a process in blocks of {args.block}, {args.rounds} "
          f"rounds: CPU us of a mark and its step (the median process), whole and with the "
          f"part skipped, and the part's cost (the median over processes of their "
          f"difference, min-max)" + (f"; every process on CPU {args.pin}" if args.pin >= 0 else ""))
    print(f"{'part':<10}{'whole':>10}{'skipped':>10}{'costs':>22}")
    costs = {}
    for p in PARTS:
        diffs = sorted(r["whole_us"] - r["skipped_us"] for r in got[p])
        costs[p] = statistics.median(diffs)
        print(f"{p:<10}{statistics.median(r['whole_us'] for r in got[p]):>10.1f}"
              f"{statistics.median(r['skipped_us'] for r in got[p]):>10.1f}"
              f"{f'{costs[p]:.1f} ({diffs[0]:.1f} to {diffs[-1]:.1f})':>22}")
    print("RESULT " + " ".join(f"{p}_us={costs[p]:.1f}" for p in PARTS))


if __name__ == "__main__":
    main()
