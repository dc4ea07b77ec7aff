"""The floor of two ways to observe every op of a PyTorch CPU training loop.

track() sees ops through a TorchDispatchMode: PyTorch calls back into Python
for every op below autograd, with every argument and result made a Python
object. That round trip alone costs more than the issue's clean target
allows on a loop of 50 us ops (bench_track.py: its "null dispatch" and
"mode, not recording" columns). This measures the alternative next to it,
in one process, blocks of iterations alternating:

  untracked      the loop alone
  C++ observer   observer_floor.cpp, built here against the installed torch:
                 PyTorch's RecordFunction callback reading every op's input
                 and output tensors (a last use per storage), plus the CPU
                 allocator wrapped (c10::SetCPUAllocator) to record every
                 allocation with the Python stack that made it, and every free
  C++ observer, recording
                 the same, also recording what track() records through
                 vramtrace's C API into its ring (host storages declared and
                 released with their stacks, tensors born and used with their
                 op's Python stack, a backward op's the stack of the forward
                 op that made its autograd node): only with $VRAMTRACE_LIB (the built
                 libvramtrace.so), whose snapshot size is printed
  null dispatch  a TorchDispatchMode whose __torch_dispatch__ only runs the op

The loop is bench_track.py's small one (MLP 256-512-512-10, batch 64, SGD,
ops of about 50 us). Times are the process's CPU time per iteration (torch
on one thread), the median of the blocks (min-max). It prints what the
observer saw per iteration (so that a floor of an observer that saw nothing
cannot pass for one) and one RESULT line; it asserts nothing about speed.

    python bench_observer_floor.py [--rounds N] [--steps N]
                (needs torch with its headers, and a C++20 compiler: $CXX or c++;
                 $VRAMTRACE_LIB adds the recording mode)

Exit status 2 when the observer cannot be built (no compiler, no headers),
77 (skipped) without torch.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build_observer(out_dir: str, with_vramtrace: bool) -> str:
    """observer_floor.cpp as a shared library against this torch (and, with
    with_vramtrace, against vramtrace's public header: its symbols come from
    the libvramtrace.so loaded before it); its path."""
    import sysconfig
    import torch
    torch_dir = os.path.dirname(torch.__file__)
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise RuntimeError("no C++ compiler (set CXX)")
    lib = os.path.join(out_dir, "libobserver_floor.so")
    abi = int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    cmd = [cxx, "-O2", "-DNDEBUG", "-std=c++20", "-shared", "-fPIC",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           "-I", os.path.join(torch_dir, "include"),
           "-I", sysconfig.get_paths()["include"],
           *(["-DWITH_VRAMTRACE", "-I", os.path.join(HERE, "..", "..", "include")]
             if with_vramtrace else []),
           os.path.join(HERE, "observer_floor.cpp"),
           "-L", os.path.join(torch_dir, "lib"), "-lc10", "-ltorch_cpu",
           f"-Wl,-rpath,{os.path.join(torch_dir, 'lib')}", "-o", lib]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"building observer_floor.cpp failed:\n{' '.join(cmd)}\n{r.stderr[-4000:]}")
    return lib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8, help="blocks per mode (default 8)")
    ap.add_argument("--steps", type=int, default=40, help="iterations per block (default 40)")
    ap.add_argument("--snapshot", metavar="PATH",
                    help="keep the recording mode's snapshot there (with $VRAMTRACE_LIB)")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 1:
        ap.error("--rounds and --steps must be at least 1")

    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError as e:
        print(f"bench_observer_floor: skipped, no torch here ({e})", file=sys.stderr)
        return 77

    vt_path = os.environ.get("VRAMTRACE_LIB")
    vt = None
    if vt_path:
        try:   # first, and global: the observer's vt_* symbols resolve to it
            vt = ctypes.CDLL(vt_path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            print(f"bench_observer_floor: VRAMTRACE_LIB: {e}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="vt-floor-") as tmp:
        try:
            lib = ctypes.CDLL(build_observer(tmp, vt is not None))
        except (RuntimeError, OSError) as e:
            print(f"bench_observer_floor: {e}", file=sys.stderr)
            return 2
    lib.floor_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.floor_start.argtypes = [ctypes.c_int]

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [torch.randn(64, 256) for _ in range(4)]

    def step(i: int) -> None:
        loss = model(batches[i % 4]).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    class NullDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def counts() -> list[int]:
        c = (ctypes.c_uint64 * 9)()
        lib.floor_counts(c)
        return list(c)

    for i in range(10):   # warm-up, untimed
        step(i)
    modes = ("untracked", "C++ observer") + (("C++ observer, recording",) if vt else ()) + \
        ("null dispatch",)
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(a.rounds):
        for m in modes:
            mode = NullDispatch() if m == "null dispatch" else None
            if m.startswith("C++ observer"):
                if lib.floor_start(int(m.endswith("recording"))) != 0:
                    print("bench_observer_floor: the CPU allocator here is not one the "
                          "observer can wrap (no raw deleter)", file=sys.stderr)
                    return 2
            elif mode is not None:
                mode.__enter__()
            c0 = time.process_time()
            for i in range(a.steps):
                step(i)
            times[m].append((time.process_time() - c0) * 1e3 / a.steps)
            if m.startswith("C++ observer"):
                lib.floor_stop()
            elif mode is not None:
                mode.__exit__(None, None, None)

    ops, uses, allocs, frees, frames, live, recorded, stacks, reads = counts()
    its = a.rounds * a.steps * (2 if vt else 1)   # iterations observed
    snap_bytes = 0
    if vt is not None:
        with tempfile.TemporaryDirectory(prefix="vt-floor-") as tmp:
            snap = a.snapshot or os.path.join(tmp, "floor.vtsnap")
            vt.vt_snapshot.argtypes = [ctypes.c_char_p]
            rc = vt.vt_snapshot(snap.encode())
            snap_bytes = os.path.getsize(snap) if rc == 0 and os.path.exists(snap) else 0
        if recorded == 0 or stacks == 0 or snap_bytes == 0:
            print(f"bench_observer_floor: recording handed vramtrace {recorded} events, "
                  f"{stacks} stacks, snapshot {snap_bytes} bytes (vt_snapshot: {rc}): "
                  f"not a floor of recording", file=sys.stderr)
            return 1
    if ops == 0 or uses == 0 or allocs == 0 or frees == 0 or frames == 0:
        print(f"bench_observer_floor: the observer saw {ops} ops, {uses} tensor uses, "
              f"{allocs} allocations, {frees} frees, {frames} frames: not a floor of "
              f"anything", file=sys.stderr)
        return 1
    base = statistics.median(times["untracked"])
    print(f"torch {torch.__version__}, {a.rounds} blocks of {a.steps} iterations per mode, "
          f"CPU ms per iteration, median (min-max):")
    print(f"{'mode':16s} {'ms/it':>24s} {'ratio':>7s}")
    ratio = {}
    for m in modes:
        med = statistics.median(times[m])
        ratio[m] = med / base
        print(f"{m:16s} {med:8.3f} ({min(times[m]):.3f}-{max(times[m]):.3f}) {ratio[m]:6.2f}x")
    print(f"the C++ observer per iteration: {ops / its:.0f} ops, {uses / its:.0f} tensor uses, "
          f"{allocs / its:.1f} allocations (each with a Python stack), {frees / its:.1f} "
          f"frees; {reads / its:.1f} Python stacks read ({frames / max(reads, 1):.1f} frames "
          f"each); {live} allocations live at the end")
    rec = ""
    if vt is not None:
        per_it = recorded / (a.rounds * a.steps)
        print(f"recording: {per_it:.0f} events per iteration handed to vramtrace, "
              f"{stacks} distinct Python stacks interned, snapshot of the whole run "
              f"{snap_bytes / 1024:.0f} KiB")
        rec = f"cpp_recording_x={ratio['C++ observer, recording']:.2f} "
    print(f"RESULT untracked_ms={base:.3f} cpp_observer_x={ratio['C++ observer']:.2f} "
          f"{rec}null_dispatch_x={ratio['null dispatch']:.2f} ops_per_it={ops / its:.0f} "
          f"allocs_per_it={allocs / its:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
