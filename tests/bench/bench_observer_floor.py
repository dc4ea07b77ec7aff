"""The floor of two ways to observe every op of a PyTorch CPU training loop.

track() sees ops through a TorchDispatchMode: PyTorch calls back into Python
for every op below autograd, with every argument and result made a Python
object. That round trip alone costs more than the issue's clean target
allows on a loop of 50 us ops (bench_track.py: its "null dispatch" and
"mode, not recording" columns). This measures the alternative next to it,
in one process, blocks of iterations alternating:

  untracked      the loop alone
  C++ observer   observer_floor.cpp, built here against the installed torch
                 (torch.utils.cpp_extension): PyTorch's RecordFunction
                 callback reading every op's input and output tensors (a
                 last use per storage), plus the CPU allocator wrapped
                 (c10::SetCPUAllocator) to see every allocation, with the
                 Python stack of the op that made it, and every free
  C++ observer, recording
                 the same, also recording what track() records through
                 vramtrace's C API into its ring: host storages declared and
                 released with their stacks, tensors born and used with their
                 op's Python stack (a backward op's: the stack of the forward
                 op that made its autograd node)
  null dispatch  bench_track.py's passthrough TorchDispatchMode

The loop is bench_track.py's small one (MLP 256-512-512-10, batch 64, SGD,
ops of about 50 us). Times are the process's CPU time per iteration (torch
on one thread), the median of the blocks (min-max). With --device cuda the
loop runs on the device (under simrun, the simulated one: each iteration
synchronized, its backward on the autograd engine's device thread, which
the observer's global callback sees too), as bench_track.py's device rows:
the floor of a tracker that keeps its books in C++, against track()'s
ratio there. Its tensors' memory is then the CUDA caching allocator's,
which the observer does not wrap: the allocations and frees it counts are
the host's, and may be none. It prints what the
observer saw per iteration, the ops the dispatch mode sees in one, and the
recording's snapshot as `vramtrace check --json` reads it (storages and
tensors), exits 1 when any of those is zero (so that the floor of an
observer that saw nothing cannot pass for one), and prints one RESULT line;
it asserts nothing about speed.

    python bench_observer_floor.py [--rounds N] [--steps N] [--snapshot PATH]
                                   [--build-dir DIR] [--device cpu|cuda]
    simrun -- python bench_observer_floor.py --device cuda ...
        (needs torch with its headers, a C++ compiler and ninja for
         torch.utils.cpp_extension, $VRAMTRACE_LIB and $VRAMTRACE_CLI)

Exit status 2 when the observer cannot be built or vramtrace is missing,
77 (skipped) without torch.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_track import passthrough_mode, training_step  # noqa: E402


def build_observer(build_dir: str) -> ctypes.PyDLL:
    """observer_floor.cpp built against this torch and vramtrace's public
    header (its vt_* symbols resolve to the libvramtrace.so loaded before
    it). PyDLL: calls keep the GIL, which guards its stack counters."""
    from torch.utils import cpp_extension
    cpp_extension.load(
        name="observer_floor", sources=[os.path.join(HERE, "observer_floor.cpp")],
        extra_cflags=["-O2", "-DNDEBUG"],   # NDEBUG: fn.inputs()'s debug-only assertion
        extra_include_paths=[os.path.join(HERE, "..", "..", "include")],
        build_directory=build_dir, is_python_module=False)
    return ctypes.PyDLL(os.path.join(build_dir, "observer_floor.so"))


def read_snapshot(cli: str, path: str) -> tuple[int, int]:
    """(storages, tensors) in the snapshot, as `vramtrace check` reads it."""
    r = subprocess.run([cli, "check", path, "--json"], capture_output=True, text=True,
                       timeout=120)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"vramtrace check {path}: {r.stderr.strip()}")
    got = json.loads(r.stdout)
    return got["storages"], got["tensors"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8, help="blocks per mode (default 8)")
    ap.add_argument("--steps", type=int, default=40, help="iterations per block (default 40)")
    ap.add_argument("--snapshot", metavar="PATH",
                    help="keep the recording mode's snapshot there")
    ap.add_argument("--build-dir", metavar="DIR",
                    help="build the observer in DIR, where ninja rebuilds it only when its "
                         "source, the headers it includes or the flags changed (default: a "
                         "new temporary directory, built from scratch)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the loop runs (cuda: under simrun, or on a GPU)")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 1:
        ap.error("--rounds and --steps must be at least 1")

    try:
        import torch
    except ImportError as e:
        print(f"bench_observer_floor: skipped, no torch here ({e})", file=sys.stderr)
        return 77
    vt_path, cli = os.environ.get("VRAMTRACE_LIB"), os.environ.get("VRAMTRACE_CLI")
    if not vt_path or not cli:
        print("bench_observer_floor: set VRAMTRACE_LIB (the built libvramtrace.so) and "
              "VRAMTRACE_CLI (the built vramtrace)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vt-floor-") as tmp:
        try:   # first, and global: the observer's vt_* symbols resolve to it
            vt = ctypes.CDLL(vt_path, mode=ctypes.RTLD_GLOBAL)
            if a.build_dir:
                os.makedirs(a.build_dir, exist_ok=True)
            lib = build_observer(a.build_dir or tmp)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
            print(f"bench_observer_floor: {e}", file=sys.stderr)
            return 2
    lib.floor_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.floor_start.argtypes = [ctypes.c_int]
    vt.vt_snapshot.argtypes = [ctypes.c_char_p]

    def counts() -> list[int]:
        c = (ctypes.c_uint64 * 9)()
        lib.floor_counts(c)
        return list(c)

    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_observer_floor: --device cuda, but no CUDA device here (run it "
              "under simrun)", file=sys.stderr)
        return 2
    loop_step = training_step("small", False, a.device)

    def step(i: int) -> None:
        loop_step(i)
        if a.device == "cuda":
            torch.cuda.synchronize()   # each iteration's time its own, as bench_track's
    for i in range(10):   # warm-up, untimed
        step(i)
    dispatch_ops = []   # the ops the dispatch mode sees in one iteration (untimed)
    with passthrough_mode(on_op=dispatch_ops.append):
        step(0)

    modes = ("untracked", "C++ observer", "C++ observer, recording", "null dispatch")
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m in modes:
            observing = m.startswith("C++ observer")
            mode = passthrough_mode() if m == "null dispatch" else None
            if observing and lib.floor_start(int(m.endswith("recording"))) != 0:
                print("bench_observer_floor: the CPU allocator here is not one the "
                      "observer can wrap (no raw deleter)", file=sys.stderr)
                return 2
            if mode is not None:
                mode.__enter__()
            c0 = time.process_time()
            for i in range(a.steps):
                step(i)
            times[m].append((time.process_time() - c0) * 1e3 / a.steps)
            if mode is not None:
                mode.__exit__(None, None, None)
            if observing:
                lib.floor_stop()

    ops, uses, allocs, frees, frames, live, recorded, stacks, reads = counts()
    its = 2 * a.rounds * a.steps   # iterations observed (both observer modes)
    with tempfile.TemporaryDirectory(prefix="vt-floor-") as tmp:
        snap = a.snapshot or os.path.join(tmp, "floor.vtsnap")
        rc = vt.vt_snapshot(snap.encode())
        n_storages, n_tensors = read_snapshot(cli, snap) if rc == 0 else (0, 0)
    seen = {"ops": ops, "tensor uses": uses, "allocations": allocs, "frees": frees,
            "Python frames": frames, "ops through the dispatch mode": len(dispatch_ops),
            "events recorded": recorded, "stacks interned": stacks,
            "storages in the snapshot": n_storages, "tensors in the snapshot": n_tensors}
    if a.device == "cuda":   # the device's memory is not the CPU allocator's
        seen = {k: v for k, v in seen.items() if k not in ("allocations", "frees")}
    if not all(seen.values()):
        print(f"bench_observer_floor: not a floor of anything (vt_snapshot: {rc}): "
              + ", ".join(f"{v} {k}" for k, v in seen.items()), file=sys.stderr)
        return 1

    base = statistics.median(times["untracked"])
    print(f"torch {torch.__version__}, on {a.device}, {a.rounds} blocks of {a.steps} "
          f"iterations per mode, "
          f"CPU ms per iteration, median (min-max):")
    print(f"{'mode':24s} {'ms/it':>24s} {'ratio':>7s}")
    ratio = {}
    for m in modes:
        med = statistics.median(times[m])
        ratio[m] = med / base
        print(f"{m:24s} {med:8.3f} ({min(times[m]):.3f}-{max(times[m]):.3f}) {ratio[m]:6.2f}x")
    print(f"the C++ observer per iteration: {ops / its:.0f} ops (the dispatch mode sees "
          f"{len(dispatch_ops)}), {uses / its:.0f} tensor uses, {allocs / its:.1f} allocations, "
          f"{frees / its:.1f} frees; {reads / its:.1f} Python stacks read "
          f"({frames / reads:.1f} frames each); {live} allocations live at the end")
    print(f"recording: {recorded / (a.rounds * a.steps):.0f} events per iteration handed to "
          f"vramtrace, {stacks} distinct Python stacks interned; the snapshot: "
          f"{n_storages} storages, {n_tensors} tensors")
    print(f"RESULT untracked_ms={base:.3f} cpp_observer_x={ratio['C++ observer']:.2f} "
          f"cpp_recording_x={ratio['C++ observer, recording']:.2f} "
          f"null_dispatch_x={ratio['null dispatch']:.2f} ops_per_it={ops / its:.0f} "
          f"dispatch_ops_per_it={len(dispatch_ops)} allocs_per_it={allocs / its:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
