"""Cost of vramtrace.torch.track() on a CPU training loop.

Runs each configuration in its own process (one trace per process):
an MLP training loop, clean and leaking (a list keeps each step's
activation), untracked, under a dispatch mode that does nothing but run the
op (the floor of any per-op recorder in Python), under track()'s own mode
with recording off (its C dispatch's floor: what PyTorch's Python-mode round
trip costs per op before anything is recorded), under track() seeing ops
through its dispatch mode (VRAMTRACE_TRACK_OBSERVER=0; the per-op path in
C, _trackfast), and under track() as users run it (its op observer, built
at first use, handing ops to the same C path), with a mark per iteration;
prints ms per iteration, the ratios tracked/untracked (as users run it,
then "mode": through the dispatch mode),
the walks the tracker made in the loop (the snapshot's is not counted), cut
off (the snapshot's included) and skipped, the stale storages left out as
resting, the marks' CPU ms per iteration (in the tracked time), the CPU ms
of the snapshot after the loop (its final walk; not in the tracked time), and
the snapshot size, then one RESULT line. The five modes alternate, one
process each per round.

The same two loops run again on a wider MLP (ops of about a millisecond
instead of 50 us; rows marked "wide"), as information: the targets are the
small loop's, where the per-op cost of a dispatch mode in Python weighs most.

Times are the process's CPU time (torch runs on one thread; vramtrace adds
none), the median of --runs processes (default 3), so that other jobs on a
shared machine change them little; wall-clock medians are printed too.

The small loop runs again on the simulated CUDA device (rows marked
"device"; each process under simrun, given by --simrun or VRAMTRACE_SIMRUN,
skipped without one), untracked and tracked as users run it: there the
backward ops run on the autograd engine's device thread, not the calling
thread. Device code does not run on the simulated device, so a step's time
is the host's work. Each step ends with a synchronize and is timed alone:
the process's CPU time (all its threads: the program's, the autograd
engine's and the simulator's stream thread), the figure the targets are
read against as on the CPU, and the wall clock, which on a shared machine
depends on when the three threads get a core. Each process gives its median
step (and the wall's fastest tenth, p10); a ratio is the median over
--device-rounds rounds (default 7, the two modes alternating) of each
round's tracked/untracked medians, p10 the best process's against the best
untracked one's, and "best" the fastest tracked process's CPU median step
against the fastest untracked one's (information: on a host whose other
tenants take the CPU now and then, a fixed Python loop's CPU time varies by
half from one process to the next, and the untracked loop's step is bimodal,
so a median ratio depends on which of its modes the untracked processes fell
in; noise only adds time, and the fastest of each is the nearest to what
tracking itself costs). Per-step medians leave out what happens once (the first
mark's lookup of the models, the first ops' lookups), which the CPU rows'
totals keep.

A third device row, "device_decode", is information, not a target: greedy
decoding under no_grad (a small decoder whose key/value cache grows by
torch.cat each token; 16 tokens a step, about 80 small ops each), tracked
without marks as an inference program runs: what an op costs tracked where
ops are small and no backward or optimizer shares the step.

--device-pin CPU runs each device process on that one CPU (all its threads):
on a shared 2-core virtual machine the untracked loop's step is bimodal
(0.5 or 0.75 ms, whether the program's, the autograd engine's and the
simulator's threads wake each other across cores, which the hypervisor
makes dear), which a ratio between two processes inherits; on one core it
is not. Information, as a second reading: the targets are read without it.

    python bench_track.py [--steps N] [--runs N] [--small-only]
                          [--simrun PATH] [--device-only] [--device-steps N]
                          [--device-rounds N] [--device-pin CPU]
                                           (needs torch and VRAMTRACE_LIB)

The issue's targets: a leaking run at most 3x untracked, a clean one at
most 1.5x. This prints what it measures; it asserts nothing.
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
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")


# (input, hidden, batch) of the MLP: the small one the targets are for, and
# a wide one whose ops are about 20x longer.
SIZES = {"small": (256, 512, 64), "wide": (1024, 2048, 256)}


def training_step(size: str = "small", leak: bool = False, device: str = "cpu"):
    """The benchmarks' training loop: an MLP of SIZES[size] with SGD,
    batches reused every 4 steps; leaking keeps one activation per step
    (128 KiB small). Returns step(i). Also used by bench_observer_floor.py."""
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    d_in, d_hid, batch = SIZES[size]
    model = torch.nn.Sequential(torch.nn.Linear(d_in, d_hid), torch.nn.ReLU(),
                                torch.nn.Linear(d_hid, d_hid), torch.nn.ReLU(),
                                torch.nn.Linear(d_hid, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    batches = [torch.randn(batch, d_in, device=device) for _ in range(4)]

    def step(i: int) -> None:
        x = batches[i % 4]
        h = model[1](model[0](x))
        loss = model[4](model[3](model[2](h))).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if leak:
            kept.append(h.detach())
    return step


def warmed_on_device(make, pin: int, warm_up: int):
    """A device row's process: on CPU ``pin`` alone where ``pin`` >= 0 (set
    before torch starts a thread: every thread inherits it), the package
    importable; the step ``make()`` builds, run ``warm_up`` times
    (untimed) and synchronized: step(i)."""
    if pin >= 0:
        os.sched_setaffinity(0, {pin})
    sys.path.insert(0, SCRIPTS)
    import torch
    step = make()
    for i in range(warm_up):
        step(i)
    torch.cuda.synchronize()
    return step


def warm_device_step(leak: bool = False, pin: int = -1):
    """The small loop on the (simulated) CUDA device, warmed up (5 steps):
    step(i), for a device row's process. Also used by bench_track_parts.py
    and bench_mark_parts.py."""
    return warmed_on_device(lambda: training_step("small", leak, "cuda"), pin, 5)


def decode_step():
    """Greedy decoding on the (simulated) CUDA device, as an inference
    program runs it: a small decoder (two layers, a key/value cache grown
    by torch.cat each token, under no_grad), a step 16 tokens from a fresh
    8-token prompt: about 80 small ops a token, no backward and no mark.
    Returns step(i)."""
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    d, vocab = 128, 500
    emb = torch.nn.Embedding(vocab, d).cuda()
    layers = [(torch.nn.Linear(d, 3 * d).cuda(), torch.nn.Linear(d, d).cuda(),
               torch.nn.Linear(d, 4 * d).cuda(), torch.nn.Linear(4 * d, d).cuda())
              for _ in range(2)]
    head = torch.nn.Linear(d, vocab).cuda()

    def token(tok, caches):
        x, grown = emb(tok), []
        for (qkv, proj, up, down), cache in zip(layers, caches):
            q, k, v = qkv(x).split(d, dim=-1)
            if cache is not None:
                k, v = torch.cat([cache[0], k], 1), torch.cat([cache[1], v], 1)
            x = x + proj((q @ k.transpose(1, 2) / d ** 0.5).softmax(-1) @ v)
            x = x + down(torch.nn.functional.gelu(up(x)))
            grown.append((k, v))
        return head(x[:, -1]).argmax(-1, keepdim=True), grown

    def step(i: int) -> None:
        with torch.no_grad():
            tok, caches = torch.randint(0, vocab, (2, 8), device="cuda"), [None, None]
            for _ in range(16):
                tok, caches = token(tok, caches)
    return step


def passthrough_mode(on_op=None):
    """A dispatch mode that only runs each op (and calls on_op(func) first,
    if given): the floor of any per-op recorder written in Python. Also used
    by bench_observer_floor.py."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            if on_op is not None:
                on_op(func)
            return func(*args, **(kwargs or {}))

    return Passthrough()


def parser(doc: str) -> argparse.ArgumentParser:
    """The command line of a track benchmark: --help prints ``doc``, and
    --simrun PATH (else $VRAMTRACE_SIMRUN, else none: no device rows).
    Also used by bench_track_parts.py."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--simrun", default=os.environ.get("VRAMTRACE_SIMRUN", ""),
                    help="the simulator's runner (default: $VRAMTRACE_SIMRUN)")
    return ap


def skip_without_torch(bench: str) -> None:
    """Exits 77 (skipped, to meson) when this Python has no torch. Also used
    by bench_track_parts.py."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"{bench}: SKIP (no torch in this Python)")
        sys.exit(77)


def child(mode: str, leak: bool, steps: int, snap: str, size: str = "small") -> None:
    sys.path.insert(0, SCRIPTS)
    step = training_step(size, leak)
    for i in range(5):   # warm-up, untimed
        step(i)
    stats = {}
    if mode in ("untracked", "dispatch"):
        mode_cm = passthrough_mode() if mode == "dispatch" else None
        if mode_cm is not None:
            mode_cm.__enter__()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(steps):
            step(i)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if mode_cm is not None:
            mode_cm.__exit__(None, None, None)
    elif mode == "mode_only":
        import vramtrace.torch as vtt
        with vtt.track() as tr:
            tr._recording = False   # the mode's C dispatch runs each op and records nothing
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(steps):
                step(i)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            stats = {"c_path": getattr(tr, "_fast", None) is not None}
            tr._recording = True
    else:
        import vramtrace
        import vramtrace.torch as vtt
        with vtt.track() as tr:
            observer = tr._observer is not None   # uninstalled at the block's end
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(steps):
                vtt.mark(f"iteration {i}")
                step(i)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            loop_walks, loop_mark_s = tr.walks, tr.walk_seconds
            s0 = time.process_time()
            vramtrace.snapshot(snap)
            snap_s = time.process_time() - s0
        stats = {"walks": loop_walks, "cutoffs": tr.walk_cutoffs,
                 "c_path": getattr(tr, "_fast", None) is not None,
                 "observer": observer,
                 "resting": getattr(tr, "resting_skipped", 0),
                 "skipped": getattr(tr, "walks_skipped", 0),
                 "postponed": tr.walks_postponed, "mark_s": round(loop_mark_s, 4),
                 "snap_ms": snap_s * 1e3, "snap_bytes": os.path.getsize(snap)}
    print(json.dumps({"ms": dc * 1e3 / steps, "wall_ms": dt * 1e3 / steps, **stats}))


def device_child(mode: str, loop: str, steps: int, pin: int = -1) -> None:
    """A loop on the (simulated) CUDA device, the small training loop
    (``loop`` "clean" or "leak") or decoding ("decode"), ``mode``
    "untracked" or "tracked" (as users run it: a training loop with a mark
    per iteration, decoding without: an inference program makes none): the
    process's CPU ms and the wall ms of each step, each step synchronized;
    their medians and the wall's fastest tenth. ``pin`` >= 0: on that CPU
    alone (before torch starts a thread: every thread inherits it)."""
    decode = loop == "decode"
    step = (warmed_on_device(decode_step, pin, 3) if decode
            else warm_device_step(loop == "leak", pin))
    import torch
    times, cpu = [], []
    stats: dict = {}

    def timed(i: int, mark=None) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        if mark is not None:
            mark(f"iteration {i}")
        step(i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if mode == "untracked":
        for i in range(steps):
            timed(i)
    else:
        import vramtrace.torch as vtt
        with vtt.track() as tr:
            observer = tr._observer is not None
            for i in range(steps):
                timed(i, None if decode else vtt.mark)
        fast = getattr(tr, "_fast", None)
        stats = {"observer": observer, "c_path": fast is not None,
                 "ops": tr.ops, "walks": tr.walks}
    times.sort()
    cpu.sort()
    print(json.dumps({"ms": times[len(times) // 2] * 1e3, "p10_ms": times[len(times) // 10] * 1e3,
                      "cpu_ms": cpu[len(cpu) // 2] * 1e3, **stats}))


def run_device(simrun: str, mode: str, loop: str, steps: int, pin: int = -1) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, env.get("PYTHONPATH", "")])
    env.pop("VRAMTRACE_TRACK_OBSERVER", None)   # as users run it
    r = subprocess.run([simrun, "--mem", "1G", "--", sys.executable, __file__, "--device-child",
                        mode, loop, str(steps), str(pin)], env=env,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"bench_track: device {mode} {loop} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def device_rows(simrun: str, steps: int, rounds: int, pin: int = -1) -> dict:
    """The device rows: for clean and leaking, ``rounds`` rounds of an
    untracked and a tracked process; printed, and their ratios returned
    (name -> (CPU ratio, wall ratio, wall p10 ratio, best CPU ratio))."""
    print(f"\nsimulated CUDA device, {steps} steps per process, {rounds} rounds: the "
          f"process's CPU ms per step (each process's median step; the median process, "
          f"min-max), then wall ms (the median process's median step / the best "
          f"process's p10); ratios: the median over rounds of tracked/untracked, p10: "
          f"best against best" + (f"; every process on CPU {pin} alone" if pin >= 0 else ""))
    print(f"{'loop':<16}{'untracked':>22}{'tracked':>22}{'cpu':>7}{'best':>7}"
          f"{'untracked wall':>16}{'tracked wall':>14}{'wall':>7}{'p10':>7}"
          f"{'ops/it':>8}{'walks':>7}")
    out = {}
    for loop, name in (("clean", "device_clean"), ("leak", "device_leaking"),
                       ("decode", "device_decode")):
        got: dict = {"untracked": [], "tracked": []}
        for _ in range(rounds):
            for mode in got:
                got[mode].append(run_device(simrun, mode, loop, steps, pin))
        base, tr = got["untracked"], got["tracked"]
        if not all(r["observer"] and r["c_path"] for r in tr):
            sys.exit("bench_track: the device runs did not use the op observer and the C path")
        cpu = statistics.median(t["cpu_ms"] / b["cpu_ms"] for t, b in zip(tr, base))
        wall = statistics.median(t["ms"] / b["ms"] for t, b in zip(tr, base))
        p10 = min(r["p10_ms"] for r in tr) / min(r["p10_ms"] for r in base)
        best = min(r["cpu_ms"] for r in tr) / min(r["cpu_ms"] for r in base)

        def cell(rs: list) -> str:
            ms = sorted(r["cpu_ms"] for r in rs)
            return f"{statistics.median(ms):.2f} ({ms[0]:.2f}-{ms[-1]:.2f})"

        def wall_cell(rs: list) -> str:
            return (f"{statistics.median(r['ms'] for r in rs):.2f} / "
                    f"{min(r['p10_ms'] for r in rs):.2f}")
        print(f"{name:<16}{cell(base):>22}{cell(tr):>22}{cpu:>6.2f}x{best:>6.2f}x"
              f"{wall_cell(base):>16}{wall_cell(tr):>14}{wall:>6.2f}x{p10:>6.2f}x"
              f"{tr[0]['ops'] / steps:>8.0f}"
              f"{statistics.median(r['walks'] for r in tr):>7.0f}")
        out[name] = (cpu, wall, p10, best)
    return out


def run(mode: str, leak: bool, steps: int, snap: str, size: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, env.get("PYTHONPATH", "")])
    # "tracked": as users run it (the op observer); the others: the mode
    env["VRAMTRACE_TRACK_OBSERVER"] = "1" if mode == "tracked" else "0"
    r = subprocess.run([sys.executable, __file__, "--child", mode, "leak" if leak else "clean",
                        str(steps), snap, size], env=env, capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        sys.exit(f"bench_track: {mode} {'leak' if leak else 'clean'} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


MODES = ("untracked", "dispatch", "mode_only", "tracked_mode", "tracked")


def median_runs(leak: bool, steps: int, snap: str, runs: int, size: str) -> dict:
    """For each mode, the run with the median CPU ms/it of ``runs``
    processes, with the median wall ms/it. The modes alternate (one process
    of each per round), so that a busy spell of a shared machine weighs on
    all of them alike instead of on one."""
    got: dict = {m: [] for m in MODES}
    for _ in range(runs):
        for mode in MODES:
            got[mode].append(run(mode, leak, steps, snap, size))
    out = {}
    for mode, rs in got.items():
        rs.sort(key=lambda r: r["ms"])
        mid = dict(rs[len(rs) // 2])
        mid["wall_ms"] = sorted(r["wall_ms"] for r in rs)[len(rs) // 2]
        mid["range"] = (rs[0]["ms"], rs[-1]["ms"])
        out[mode] = mid
    return out


def cpu_rows(steps: int, runs: int, res: dict, small_only: bool = False) -> None:
    """The CPU rows, printed; their ratios into ``res`` (name -> ratios)."""
    with tempfile.TemporaryDirectory() as tmp:
        print(f"CPU ms per iteration, median of {runs} processes (min-max); wall ms medians after /")
        print(f"{'loop':<13}{'untracked':>31}{'null dispatch':>31}{'mode, not recording':>31}"
              f"{'tracked (mode)':>31}{'tracked':>31}"
              f"{'ratio':>8}{'mode':>7}"
              f"{'floor':>7}{'floorC':>7}{'walks':>7}{'cut':>5}{'skip':>6}{'rest':>6}{'mark_ms':>8}{'snap_ms':>8}{'snapshot':>10}")
        sizes = ("small",) if small_only else ("small", "wide")
        for size, leak in [(z, lk) for z in sizes for lk in (False, True)]:
            name = ("leaking" if leak else "clean") + ("" if size == "small" else "_wide")
            snap = os.path.join(tmp, f"{name}.vtsnap")
            got = median_runs(leak, steps, snap, runs, size)
            base, floor, mode_only, trmode, tr = (got[m] for m in MODES)
            if not tr["c_path"] or not mode_only["c_path"] or \
                    trmode["observer"] or not tr["observer"]:
                sys.exit("bench_track: the C path or the op observer was not used where "
                         "expected (is _trackfast built in the build tree of VRAMTRACE_LIB? can "
                         "torch.utils.cpp_extension build here?)")
            ratio = tr["ms"] / base["ms"]
            res[name] = (ratio, floor["ms"] / base["ms"], mode_only["ms"] / base["ms"],
                         trmode["ms"] / base["ms"])

            def cell(r: dict) -> str:
                return f"{r['ms']:.2f} ({r['range'][0]:.2f}-{r['range'][1]:.2f}) / {r['wall_ms']:.1f}"
            print(f"{name:<13}{cell(base):>31}{cell(floor):>31}{cell(mode_only):>31}"
                  f"{cell(trmode):>31}{cell(tr):>31}{ratio:>7.2f}x"
                  f"{res[name][3]:>6.2f}x"
                  f"{res[name][1]:>6.2f}x{res[name][2]:>6.2f}x{tr['walks']:>7}{tr['cutoffs']:>5}{tr['skipped']:>6}"
                  f"{tr['resting']:>6}{tr['mark_s'] * 1e3 / steps:>8.2f}"
                  f"{tr['snap_ms']:>8.0f}{tr['snap_bytes'] / 1024:>6.0f} KiB")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3] == "leak", int(sys.argv[4]), sys.argv[5], sys.argv[6])
        return
    if sys.argv[1:2] == ["--device-child"]:
        device_child(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                     int(sys.argv[5]) if len(sys.argv) > 5 else -1)
        return
    ap = parser(__doc__)
    for flag, default in (("--steps", 60), ("--runs", 3), ("--device-steps", 100),
                          ("--device-rounds", 7), ("--device-pin", -1)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--small-only", action="store_true")
    ap.add_argument("--device-only", action="store_true")
    args = ap.parse_args()
    steps, runs, simrun = args.steps, args.runs, args.simrun
    skip_without_torch("bench_track")
    res: dict = {}
    if not args.device_only:
        cpu_rows(steps, runs, res, args.small_only)
    dev: dict = {}
    if simrun:
        dev = device_rows(simrun, args.device_steps, args.device_rounds, args.device_pin)
    else:
        print("bench_track: no device rows (no --simrun or VRAMTRACE_SIMRUN)")
    fields = []
    if res:
        fields.append(
            f"steps={steps} runs={runs} clean_ratio={res['clean'][0]:.2f} "
            f"leaking_ratio={res['leaking'][0]:.2f} mode_path_clean={res['clean'][3]:.2f} "
            f"mode_path_leaking={res['leaking'][3]:.2f} dispatch_floor_clean={res['clean'][1]:.2f} "
            f"dispatch_floor_leaking={res['leaking'][1]:.2f} "
            f"mode_floor_clean={res['clean'][2]:.2f} mode_floor_leaking={res['leaking'][2]:.2f} "
            f"targets: clean<=1.5 leaking<=3.0 "
            + (f"(wide: clean_ratio={res['clean_wide'][0]:.2f} "
               f"leaking_ratio={res['leaking_wide'][0]:.2f})" if "clean_wide" in res else ""))
    if dev:
        fields.append(" ".join(
            f"{n}_ratio={dev[n][0]:.2f} {n}_wall_ratio={dev[n][1]:.2f} "
            f"{n}_p10_ratio={dev[n][2]:.2f} {n}_best_ratio={dev[n][3]:.2f}"
            for n in ("device_clean", "device_leaking", "device_decode"))
            + " device_targets: clean<=1.5 leaking<=3.0 (decode: information)")
    print("RESULT " + " ".join(fields))


if __name__ == "__main__":
    main()
