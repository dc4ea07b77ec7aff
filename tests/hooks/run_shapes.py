#!/usr/bin/env python3
"""Run one test program with and without libvramtrace preloaded and compare.

usage: run_shapes.py --lib LIBVRAMTRACE --simdir DIR --check KIND [--conf C] -- PROG [ARGS...]

Both runs must exit 0 and print the same stdout. The counters the program
writes to $HOOKS_STATS (tests/hooks/hk_stats.h) are then checked:
  loop    the cache absorbed the repeated allocations (far fewer device
          allocations than the program made) and counted each user
          allocation exactly once
  cub     a program that caches itself: every device allocation it still
          makes is served by the cache and counted once
  same    only the output is compared (race, bad frees, ...)
  near    the output is compared with every integer allowed to differ by
          --tolerance (a fraction of the plain run's value)
  atleast the same text, and every integer of the preloaded run at least
          (1 - --tolerance) x the plain run's: block counts of a program
          that fills the device (the preload may fit more; the numbers are
          printed)
--active additionally requires the cache's statistics in the preloaded run
(the hooks were really loaded, not silently absent).
--sim-only WHY skips the test (77) on a real driver, saying why.
--on-sim PROG2 runs PROG2 instead of PROG when the libcuda.so.1 in --simdir
is the simulator (it exports simcuda_stats): PROG linked with the toolkit's
static runtime, which cannot run on the simulator, PROG2 the same program
linked with the simulator's (tests/hooks/meson.build).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def run(prog, env, timeout=40):
    with tempfile.NamedTemporaryFile(prefix="hkstats", delete=False) as f:
        stats_path = f.name
    env = dict(env, HOOKS_STATS=stats_path)
    p = subprocess.run(prog, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    stats = {}
    try:
        with open(stats_path) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k:
                    stats[k] = int(v)
    finally:
        os.unlink(stats_path)
    return p, stats


def fail(msg, *runs):
    print("FAIL:", msg)
    for name, p in runs:
        print(f"--- {name}: exit {p.returncode}\nstdout:\n{p.stdout.decode(errors='replace')}"
              f"stderr:\n{p.stderr.decode(errors='replace')[-3000:]}")
    sys.exit(1)


def near(plain, hooked, tol):
    """Same text, integers within tol x the plain run's value."""
    num = re.compile(r"\d+")
    if num.sub("#", plain) != num.sub("#", hooked):
        return False
    for x, y in zip(num.findall(plain), num.findall(hooked)):
        if abs(int(x) - int(y)) > tol * int(x):
            return False
    return True


def at_least(plain, hooked, tol):
    """Same text, each integer of hooked >= (1 - tol) x plain's."""
    num = re.compile(r"\d+")
    if num.sub("#", plain) != num.sub("#", hooked):
        return False
    return all(int(y) >= (1 - tol) * int(x)
               for x, y in zip(num.findall(plain), num.findall(hooked)))


def on_simulator(simdir):
    """Is the driver in simdir the simulator (it exports simcuda_stats)? Read,
    not loaded: a sanitizer build's library cannot be loaded into Python."""
    try:
        with open(os.path.join(simdir, "libcuda.so.1"), "rb") as f:
            return b"simcuda_stats" in f.read()
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simdir", required=True)
    ap.add_argument("--check", default="same", choices=["loop", "cub", "same", "near", "atleast"])
    ap.add_argument("--tolerance", type=float, default=0.0)
    ap.add_argument("--conf", default=None)
    ap.add_argument("--active", action="store_true")
    ap.add_argument("--on-sim", default=None)
    ap.add_argument("--sim-only", default=None, metavar="WHY",
                    help="skip (77) when --simdir's driver is not the simulator, saying WHY")
    ap.add_argument("prog", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    prog = a.prog
    if prog and prog[0] == "--":
        prog = prog[1:]
    if a.on_sim and on_simulator(a.simdir):
        prog = [a.on_sim] + prog[1:]
    if a.sim_only and not on_simulator(a.simdir):
        print("SKIP: on a real driver", a.sim_only)
        sys.exit(77)

    if not os.path.isfile(a.lib):
        print("FAIL: no such library:", a.lib)
        sys.exit(1)

    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    base.pop("VRAMTRACE_CONF", None)
    base["LD_LIBRARY_PATH"] = a.simdir + (":" + base["LD_LIBRARY_PATH"]
                                          if base.get("LD_LIBRARY_PATH") else "")
    base.setdefault("SIMCUDA_MEM", "4G")
    pre = dict(base, LD_PRELOAD=os.path.abspath(a.lib))
    if a.conf:
        pre["VRAMTRACE_CONF"] = a.conf

    plain, s0 = run(prog, base)
    if plain.returncode != 0:
        fail("program fails without the preload", ("plain", plain))
    hooked, s1 = run(prog, pre)
    if hooked.returncode != 0:
        fail("program fails with the preload", ("plain", plain), ("preload", hooked))
    if a.check == "near":
        if not near(plain.stdout.decode(), hooked.stdout.decode(), a.tolerance):
            fail(f"output differs with the preload by more than {a.tolerance:.0%}",
                 ("plain", plain), ("preload", hooked))
    elif a.check == "atleast":
        ok = at_least(plain.stdout.decode(), hooked.stdout.decode(), a.tolerance)
        counts = [(x, y) for x, y in zip(re.findall(r"filled with (\d+)", plain.stdout.decode()),
                                         re.findall(r"filled with (\d+)", hooked.stdout.decode()))]
        print("blocks that fit (plain, preload):",
              ", ".join(f"{x} and {y}" for x, y in counts))
        if not ok:
            fail(f"the preload fits fewer blocks (bound: {1 - a.tolerance:.0%} of plain)",
                 ("plain", plain), ("preload", hooked))
    elif plain.stdout != hooked.stdout:
        fail("output differs with the preload", ("plain", plain), ("preload", hooked))
    if "vt_allocs" in s0:
        fail("vramtrace is loaded in the plain run", ("plain", plain))

    # On a real driver (scripts/gpu-check) nobody counts the device's calls
    # but the cache itself: the preloaded run's device allocations are the
    # cache's own count (vt_backend_allocs), the plain run's are not known.
    real = "sim_alloc_calls" not in s1 and not on_simulator(a.simdir)

    def dev_allocs(s):
        if real:
            return s.get("vt_backend_allocs", 0)
        return s.get("sim_alloc_calls", 0) + s.get("sim_alloc_async_calls", 0)

    print("plain  :", s0)
    print("preload:", s1)
    if (a.active or a.check in ("loop", "cub")) and "vt_allocs" not in s1:
        fail("no cache statistics with the preload (hooks not active?)", ("preload", hooked))
    if a.check in ("loop", "cub"):
        if "vt_allocs" not in s1:
            fail("no cache statistics with the preload (hooks not active?)",
                 ("preload", hooked))
        if "sim_alloc_calls" not in s1 and not real:
            fail("no simulator statistics", ("preload", hooked))
        if real:
            print("a real driver: the device's allocations are the cache's own count; "
                  "the plain run's are not counted")
    if a.check == "loop":
        user = s1["user_allocs"]
        if s1["vt_allocs"] != user:
            fail(f"cache counted {s1['vt_allocs']} allocations for {user} made",
                 ("preload", hooked))
        if not real and dev_allocs(s0) < user:
            fail(f"plain run made {dev_allocs(s0)} device allocations for {user}",
                 ("plain", plain))
        if dev_allocs(s1) * 10 > user:
            fail(f"cache did not absorb: {dev_allocs(s1)} device allocations for {user}",
                 ("preload", hooked))
    if a.check == "cub":
        # cub calls cudaMalloc once per new bin block: each is one cache
        # allocation (counted once), and the device sees no more than without.
        if not real and s1["vt_allocs"] != dev_allocs(s0):
            fail(f"cache counted {s1['vt_allocs']} allocations, cub made {dev_allocs(s0)}",
                 ("plain", plain), ("preload", hooked))
        if dev_allocs(s1) > (s1["vt_allocs"] if real else dev_allocs(s0)):
            fail("more device allocations with the cache than without", ("preload", hooked))
    print("ok:", plain.stdout.decode().strip().replace("\n", " | "))


if __name__ == "__main__":
    main()
