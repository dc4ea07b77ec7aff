#!/usr/bin/env python3
"""`vramtrace run`: options, environment, exit status, outputs.

usage: test_run_command.py VRAMTRACE_EXE LIBVRAMTRACE PROG_RT_SIM SIM_LIBDIR
"""
import os
import subprocess
import sys
import tempfile

exe, lib, prog, simdir = (os.path.abspath(a) for a in sys.argv[1:5])
lib = os.path.realpath(lib)
base = dict(os.environ)
for k in ("LD_PRELOAD", "VRAMTRACE_CONF", "VRAMTRACE_OUT", "VRAMTRACE_LIB"):
    base.pop(k, None)
base["LD_LIBRARY_PATH"] = simdir
base.setdefault("SIMCUDA_MEM", "4G")
failures = []


def sim_allocs(text):
    """The device's allocations: the simulator's count; on a real driver
    (scripts/gpu-check), which counts nothing, the cache's own."""
    kv = dict(l.split("=", 1) for l in text.split() if "=" in l)
    if "sim_alloc_calls" not in kv:
        return int(kv.get("vt_backend_allocs", 0))
    return int(kv.get("sim_alloc_calls", 0)) + int(kv.get("sim_alloc_async_calls", 0))


def run(args, env=None, **kw):
    return subprocess.run([exe, "run"] + args, env=env or base, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=40, **kw)


def check(name, cond, p=None):
    if cond:
        print("ok  ", name)
        return
    print("FAIL", name)
    if p is not None:
        print("  exit", p.returncode, "\n  stdout:", p.stdout.decode(errors="replace"),
              "\n  stderr:", p.stderr.decode(errors="replace"))
    failures.append(name)


p = run(["--help"])
check("--help exits 0 with usage on stdout", p.returncode == 0 and b"usage: vramtrace run" in p.stdout, p)
p = run(["--frobnicate", "--", "true"])
check("unknown option: status 2 and a message",
      p.returncode == 2 and b"unknown option '--frobnicate'" in p.stderr, p)
p = run([])
check("missing command: status 2", p.returncode == 2 and b"no command" in p.stderr, p)
p = run(["--"])
check("'--' alone: status 2", p.returncode == 2 and b"no command" in p.stderr, p)
p = run(["-o"])
check("-o without value: status 2", p.returncode == 2 and b"needs a value" in p.stderr, p)
p = run(["--", "sh", "-c", "exit 7"])
check("exit status passes through", p.returncode == 7, p)
p = run(["--", "sh", "-c", "kill -TERM $$"])
check("signal death is 128+sig", p.returncode == 128 + 15 and b"signal 15" in p.stderr, p)
p = run(["--", "/nonexistent/program"])
check("missing program: 127", p.returncode == 127 and b"cannot run" in p.stderr, p)

p = run(["--", "sh", "-c", 'echo "$LD_PRELOAD"'])
check("LD_PRELOAD is our library", p.stdout.decode().strip() == lib, p)
env = dict(base, LD_PRELOAD="/nonexistent/other.so")
p = run(["--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env)
check("LD_PRELOAD is prepended", p.stdout.decode().strip() == lib + ":/nonexistent/other.so", p)
env = dict(base, VRAMTRACE_CONF="free_sync:1,cache:1")
p = run(["--conf", "max_split_size_mb:64", "--no-cache", "--", "sh", "-c",
         'echo "$VRAMTRACE_CONF"'], env=env)
check("--conf merges, --no-cache wins",
      p.stdout.decode().strip() == "free_sync:1,cache:0,max_split_size_mb:64", p)
for bad, said in (("max_split:10", b"unknown VRAMTRACE_CONF key 'max_split'"),
                  ("signal:SIGUSR3", b"bad value 'SIGUSR3' for VRAMTRACE_CONF key 'signal'"),
                  ("cache", b"'cache' is not key:value")):
    for args in (["--conf", bad], ["--conf=" + bad]):
        p = run(["--conf", "free_sync:1"] + args + ["--", "sh", "-c", "echo ran"])
        check("bad %s: status 2, said, the program not started" % " ".join(args),
              p.returncode == 2 and said in p.stderr and b"not started" in p.stderr
              and b"keeping the default" not in p.stderr and b"ran" not in p.stdout, p)
env = dict(base, VRAMTRACE_CONF="cache:2")
p = run(["--", "sh", "-c", "echo ran"], env=env)
check("a bad VRAMTRACE_CONF of the environment is the library's to judge: the program runs",
      p.returncode == 0 and b"ran" in p.stdout, p)
env = dict(base, VRAMTRACE_LIB="/nonexistent/libvramtrace.so")
p = run(["--", "true"], env=env)
check("bad VRAMTRACE_LIB: status 2", p.returncode == 2 and b"VRAMTRACE_LIB" in p.stderr, p)
env = dict(base, VRAMTRACE_LIB=lib)
p = run(["--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env)
check("VRAMTRACE_LIB is used", p.stdout.decode().strip() == lib, p)

with tempfile.TemporaryDirectory() as d:
    stats = os.path.join(d, "stats")
    env = dict(base, HOOKS_STATS=stats)
    p = run(["-o", "snap.vtsnap", "--", prog], env=env, cwd=d)
    check("a CUDA program runs under the preload", p.returncode == 0, p)
    text = open(stats).read() if os.path.exists(stats) else ""
    check("its allocations went through the cache", "vt_allocs=600" in text, p)
    out = os.path.join(d, "snap.vtsnap")
    check("-o: the snapshot is written and reported",
          os.path.exists(out) and out.encode() in p.stderr, p)
    p = run(["--no-cache", "--", prog], env=env, cwd=d)
    text = open(stats).read() if os.path.exists(stats) else ""
    check("--no-cache: every allocation reaches the device",
          p.returncode == 0 and sim_allocs(text) == 600, p)

# Without -o the snapshot goes to vramtrace-NAME.PID.vtsnap in the current
# directory (NAME: the program's, or a Python command's script or module),
# with the command that reads it.
with tempfile.TemporaryDirectory() as d:
    p = run(["--", prog], cwd=d)
    name = os.path.basename(prog)
    made = [f for f in os.listdir(d) if f.startswith(f"vramtrace-{name}.")]
    check("no -o: vramtrace-NAME.PID.vtsnap written in the current directory",
          p.returncode == 0 and len(made) == 1 and made[0].endswith(".vtsnap") and
          os.path.join(d, made[0]).encode() in p.stderr and
          f"`vramtrace check {made[0]}` names what stays alive".encode() in p.stderr, p)
    for cmd, want in ((["python3", "-u", "-W", "ignore", os.path.join(d, "my train.py")],
                       b"/vramtrace-my_train."),
                      (["python3", "-m", "pkg.mod"], b"/vramtrace-pkg.mod."),
                      (["sh", "-c", "exit 0"], b"/vramtrace-sh.")):
        p = run(["--"] + cmd, cwd=d)
        # nothing recorded (no CUDA): no file, its name said
        check(f"no -o: {' '.join(cmd[:2])}... is named {want.decode()}",
              want in p.stderr and b"no exit snapshot" in p.stderr, p)
    check("no -o: nothing written for a program that recorded nothing",
          sorted(os.listdir(d)) == made, None)

if failures:
    print(len(failures), "failed")
    sys.exit(1)
