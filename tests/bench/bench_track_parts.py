"""Where track()'s cost on the simulated CUDA device goes: bench_track.py's
small loop (device rows) taken apart, one process per variant under simrun,
the variants alternating over --rounds rounds:

  untracked      the loop alone
  hook           PyTorch's RecordFunction hook alone: a callback that does
                 nothing (hook_floor.cpp, built here against the installed
                 torch), installed as the op observer installs its own
                 (every op's inputs and outputs asked for, thread-local, so
                 the autograd engine's threads run it too): what any op
                 observer costs before it does anything
  observer       track() with its op observer handing every op to
                 ``"".format`` (a C callable that ignores its arguments)
                 instead of the recording: PyTorch's RecordFunction hook,
                 the observer's own work (inputs kept, the GIL, tensors
                 given Python objects, the autograd engine's ops held and
                 handed over) and nothing recorded
  no marks       track() as users run it, no mark
  bare marks     track() with a mark a step that does only what orders the
                 events (the ops held back handed over, the step counted,
                 the MARK recorded): its policy (the grads and buffers
                 followed, the sweep, the ring's and the walks' checks)
                 skipped, a measuring device, not a way to run
  tracked        track() with a mark a step (bench_track's device rows)
  stand-in       the loop alone with 400 KB zeroed between its steps,
                 untimed: what any work between the program's steps costs
                 its next step (the caches it empties), to read the rows
                 above by (a mark's work is paid about twice)

Each process gives the median of its steps' CPU time (all its threads; a
step synchronized and timed alone); a row is the median process (min-max)
and the median over rounds of its ratio to the same round's untracked
process. The differences between rows are the parts: the observer's, the
recording's, the mark's (its ordering, then its policy), above PyTorch's own
(the hook's); the stand-in's is against untracked. Without a
C++ compiler for torch.utils.cpp_extension the hook row is left out (said
so). --pin CPU runs each process on that one CPU (all its threads), as
bench_track.py's --device-pin: on a shared 2-core machine an unpinned
untracked step is bimodal (its threads waking each other across cores), and
the rows' differences are smaller than that. Prints one RESULT line; asserts
nothing about speed.

    python bench_track_parts.py [--steps N] [--rounds N] [--simrun PATH] [--pin CPU]
        (needs torch and VRAMTRACE_LIB; simrun by --simrun or VRAMTRACE_SIMRUN)

Where a row's time goes, by hand: one variant's process (``--child VARIANT
STEPS CPU``; the hook row also wants VT_BENCH_HOOK_FLOOR, a built
hook_floor.so) under ``perf record`` started disabled, which the child
enables around its timed steps only (not the import, the build, the warm-up):

    mkfifo /tmp/ctl /tmp/ack
    VT_BENCH_PERF_CTL=/tmp/ctl VT_BENCH_PERF_ACK=/tmp/ack perf record -F 1000 -D -1 \
        --control fifo:/tmp/ctl,/tmp/ack -o tracked.data -- "$VRAMTRACE_SIMRUN" -- \
        python bench_track_parts.py --child tracked 4000 1

then ``perf report -i tracked.data --no-children --sort dso,sym -n`` beside the
untracked process's, their samples divided by the steps (sampling slows both).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
VARIANTS = ("untracked", "hook", "observer", "no marks", "bare marks", "tracked", "stand-in")
STAND_IN_BYTES = 400 << 10   # zeroed between the stand-in row's steps
HOOK_ENV = "VT_BENCH_HOOK_FLOOR"   # the built hook_floor.so, for the children
PERF_ENV = ("VT_BENCH_PERF_CTL", "VT_BENCH_PERF_ACK")   # perf's control and ack fifos
sys.path.insert(0, HERE)
from bench_track import parser, skip_without_torch, warm_device_step  # noqa: E402


def build_hook(build_dir: str) -> str:
    """hook_floor.cpp built against this torch into ``build_dir``: its path."""
    from torch.utils import cpp_extension
    cpp_extension.load(name="hook_floor", sources=[os.path.join(HERE, "hook_floor.cpp")],
                       extra_cflags=["-O2"], build_directory=build_dir, is_python_module=False)
    return os.path.join(build_dir, "hook_floor.so")


def perf_control(command: str) -> None:
    """``command`` (enable, disable) to a ``perf record --control`` whose
    fifos PERF_ENV name, and its acknowledgement awaited; nothing without."""
    ctl, ack = (os.environ.get(v) for v in PERF_ENV)
    if not ctl or not ack:
        return
    with open(ctl, "w") as f:
        f.write(command + "\n")
    with open(ack) as f:
        f.read(5)


def child(variant: str, steps: int, pin: int) -> None:
    step = warm_device_step(False, pin)
    import torch
    cpu: list = []

    def timed(i: int, mark=None) -> None:
        if variant == "stand-in":
            bytes(STAND_IN_BYTES)   # untimed: its cost is what the step pays after it
        c0 = time.process_time()
        if mark is not None:
            mark(f"iteration {i}")
        step(i)
        torch.cuda.synchronize()
        cpu.append(time.process_time() - c0)
    hook = None
    if variant == "hook":
        import ctypes
        hook = ctypes.CDLL(os.environ[HOOK_ENV])
        hook.hook_floor_calls.restype = ctypes.c_ulonglong
        hook.hook_floor_start()
    if variant in ("untracked", "hook", "stand-in"):
        perf_control("enable")
        for i in range(steps):
            timed(i)
        perf_control("disable")
        print(json.dumps({"cpu_ms": statistics.median(cpu) * 1e3, "observer": False,
                          "hook_calls": hook.hook_floor_calls() / steps if hook else 0}))
        return
    import vramtrace._trackobs as trackobs
    import vramtrace.torch as vtt
    if variant == "observer":
        install = trackobs.Observer.install

        def to_nothing(self, on_owner, on_other, *rest, engine_uses=0, dispatcher=0):
            # without engine_uses: every backward op goes to on_other too
            return install(self, "".format, "".format, *rest)
        trackobs.Observer.install = to_nothing
    if variant == "bare marks":
        from vramtrace.torch._tracker import Tracker

        def ordering_only(self, kind: str, arg: str) -> None:
            self._fast.flush()
            if kind in ("mark", "tick"):
                self._fast.epoch += 1
        Tracker._on_mark = ordering_only
    with vtt.track() as tr:
        observer = tr._observer is not None   # (none once the block ends)
        perf_control("enable")
        for i in range(steps):
            timed(i, vtt.mark if variant in ("tracked", "bare marks") else None)
        perf_control("disable")
    print(json.dumps({"cpu_ms": statistics.median(cpu) * 1e3, "observer": observer}))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else -1)
        return
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pin", type=int, default=-1, help="run every process on this CPU")
    args = ap.parse_args()
    steps, rounds, pin, simrun = args.steps, args.rounds, args.pin, args.simrun
    skip_without_torch("bench_track_parts")
    if not simrun:
        print("bench_track_parts: SKIP (no --simrun or VRAMTRACE_SIMRUN)")
        sys.exit(77)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, env.get("PYTHONPATH", "")])
    env.pop("VRAMTRACE_TRACK_OBSERVER", None)   # as users run it
    with tempfile.TemporaryDirectory(prefix="vt-hook-floor-") as build_dir:
        variants = VARIANTS
        try:
            env[HOOK_ENV] = build_hook(build_dir)
        except Exception as exc:   # noqa: BLE001 - no compiler: the other rows still mean something
            print(f"bench_track_parts: no hook row (hook_floor.cpp did not build: {exc})")
            variants = tuple(v for v in VARIANTS if v != "hook")
        got, hook_calls = measure(simrun, env, variants, steps, rounds, pin)
    report(got, variants, steps, rounds, pin, hook_calls)


def measure(simrun: str, env: dict, variants: tuple, steps: int, rounds: int,
            pin: int) -> tuple:
    """{variant: [CPU ms a step, a process each round]}, and the hook's calls
    a step (0 without a hook row)."""
    got: dict = {v: [] for v in variants}
    hook_calls = 0.0
    for _ in range(rounds):
        for v in variants:
            r = subprocess.run([simrun, "--mem", "1G", "--", sys.executable, __file__, "--child",
                                v, str(steps), str(pin)], env=env, capture_output=True, text=True,
                               timeout=900)
            if r.returncode != 0:
                sys.exit(f"bench_track_parts: {v} failed:\n{r.stderr[-2000:]}")
            res = json.loads(r.stdout.strip().splitlines()[-1])
            if v not in ("untracked", "hook", "stand-in") and not res["observer"]:
                sys.exit(f"bench_track_parts: {v} did not use the op observer")
            if v == "hook" and res["hook_calls"] == 0:
                sys.exit("bench_track_parts: the hook saw no op (installed nowhere?)")
            hook_calls = res.get("hook_calls") or hook_calls
            got[v].append(res["cpu_ms"])
    return got, hook_calls


def report(got: dict, variants: tuple, steps: int, rounds: int, pin: int,
           hook_calls: float) -> None:
    """The table and the RESULT line."""
    print(f"simulated CUDA device, bench_track's small loop, {steps} steps per process, "
          f"{rounds} rounds: CPU ms a step (the median process, min-max), the median "
          f"over rounds of the ratio to untracked, and what the row adds to the one above "
          f"(the stand-in: to untracked)"
          + (f"; every process on CPU {pin} alone" if pin >= 0 else ""))
    print(f"{'variant':<12}{'ms/step':>20}{'ratio':>8}{'adds ms':>9}")
    med = {v: statistics.median(got[v]) for v in variants}
    ratio = {v: statistics.median(a / b for a, b in zip(got[v], got["untracked"]))
             for v in variants}
    for i, v in enumerate(variants):
        ms = sorted(got[v])
        above = "untracked" if v == "stand-in" else variants[i - 1]
        adds = f"{med[v] - med[above]:+.3f}" if i else ""
        print(f"{v:<12}{f'{med[v]:.3f} ({ms[0]:.3f}-{ms[-1]:.3f})':>20}{ratio[v]:>7.2f}x"
              f"{adds:>9}")
    hook = (f"hook_x={ratio['hook']:.2f} hook_ms={med['hook'] - med['untracked']:.3f} "
            f"hook_calls_per_step={hook_calls:.0f} "
            if "hook" in med else "hook_x=none ")
    print(f"RESULT untracked_ms={med['untracked']:.3f} {hook}observer_x={ratio['observer']:.2f} "
          f"no_marks_x={ratio['no marks']:.2f} tracked_x={ratio['tracked']:.2f} "
          f"observer_ms={med['observer'] - med['untracked']:.3f} "
          f"recording_ms={med['no marks'] - med['observer']:.3f} "
          f"marks_ms={med['tracked'] - med['no marks']:.3f} "
          f"mark_policy_ms={med['tracked'] - med['bare marks']:.3f} "
          f"stand_in_ms={med['stand-in'] - med['untracked']:.3f}")


if __name__ == "__main__":
    main()
