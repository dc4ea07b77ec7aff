#!/usr/bin/env python3
"""`vramtrace run` and the snapshots of a run: wrappers, several recording
processes, ranks, signals, exec, bad or lost output paths.

usage: test_run_snapshots.py VRAMTRACE_EXE LIBVRAMTRACE PROG_RT_SIM PROG_MISC SIM_LIBDIR CASE [ARG]

Each CASE is one meson test (tests/hooks/meson.build).
"""
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

exe, lib, prog, misc, simdir = (os.path.abspath(a) for a in sys.argv[1:6])
case = sys.argv[6]
arg = sys.argv[7] if len(sys.argv) > 7 else None
base = dict(os.environ)
for k in ("LD_PRELOAD", "VRAMTRACE_CONF", "VRAMTRACE_OUT", "VRAMTRACE_LIB", "VRAMTRACE_RUN_DIR",
          "RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
    base.pop(k, None)
base["LD_LIBRARY_PATH"] = simdir
base.setdefault("SIMCUDA_MEM", "4G")


def fail(msg, p=None):
    print("FAIL", msg)
    if p is not None:
        print("  exit", p.returncode, "\n  stdout:", p.stdout, "\n  stderr:", p.stderr)
    sys.exit(1)


def run(args, env=None, cwd=None):
    return subprocess.run([exe, "run"] + args, env=env or base, cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=50)


def summary(path):
    """`vramtrace summary` of a snapshot: (pid, text); fails the test if unreadable."""
    p = subprocess.run([exe, "summary", path], text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=50)
    if p.returncode != 0:
        fail("unreadable snapshot " + path, p)
    for line in p.stdout.splitlines():
        if ", pid " in line:
            return int(line.split(", pid ")[1].split(",")[0]), p.stdout
    fail("no pid in the summary of " + path, p)


def snapshots(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".vtsnap"))


def listed(p):
    """The snapshots `run` listed: [(path, kind)]."""
    out = []
    for line in p.stderr.splitlines():
        if line.startswith("vramtrace run: snapshot written to "):
            rest = line[len("vramtrace run: snapshot written to "):]
            path, _, what = rest.rpartition(" (")
            out.append((path, what.split(",")[0]))
    return out


def wait_for(cond, what, timeout=40):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    fail("timed out waiting for " + what)


def start_hold(d, extra_env=None, conf=None):
    """`vramtrace run -o d/x.vtsnap -- prog_misc hold`, once the program allocated."""
    env = dict(base, **(extra_env or {}))
    args = [exe, "run", "-o", os.path.join(d, "x.vtsnap")]
    if conf:
        args += ["--conf", conf]
    p = subprocess.Popen(args + ["--", misc, "hold"], env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.stdout.readline().strip() != "ready":
        p.kill()
        fail("the held program did not start: " + p.stderr.read())
    return p


def finish(p):
    out, err = p.communicate(timeout=50)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def case_wrapper_that_records_nothing_keeps_the_programs_snapshot(d):
    """timeout, bash -c and a Python launcher record nothing: the program's
    snapshot is the one at -o, and the only one listed."""
    wrappers = {
        "timeout": ["timeout", "60", prog],
        "bash": ["bash", "-c", prog + "; echo after"],
        "python": [sys.executable, "-c",
                   "import subprocess, sys; sys.exit(subprocess.call([%r]))" % prog],
    }
    out = os.path.join(d, "x.vtsnap")
    p = run(["-o", out, "--"] + wrappers[arg])
    if p.returncode != 0:
        fail("the wrapped program failed", p)
    pid, _ = summary(out)
    if [os.path.basename(x[0]) for x in listed(p)] != ["x.vtsnap"]:
        fail("run must list exactly the program's snapshot", p)
    if snapshots(d) != ["x.vtsnap"]:
        fail("files: %s" % snapshots(d), p)
    if "sync: iterations=300" not in p.stdout:
        fail("the program did not run", p)
    # the snapshot is the program's, not the wrapper's (whose pid is run's child)
    if "allocated" not in summary(out)[1] or pid <= 0:
        fail("the snapshot has no allocator state", p)


def case_vramtrace_out_from_the_environment_is_checked_and_listed_like_o(d):
    out = os.path.join(d, "env.vtsnap")
    p = run(["--", prog], env=dict(base, VRAMTRACE_OUT=out))
    if p.returncode != 0 or [x[0] for x in listed(p)] != [out]:
        fail("VRAMTRACE_OUT must be handled as -o", p)
    summary(out)
    p = run(["--", prog], env=dict(base, VRAMTRACE_OUT=os.path.join(d, "nodir", "x.vtsnap")))
    if p.returncode != 2 or "cannot write snapshots in" not in p.stderr:
        fail("an unwritable VRAMTRACE_OUT must be refused up front", p)


def case_a_snapshot_that_lost_the_runs_start_says_so_and_the_ring_that_keeps_it(d):
    """A run longer than its ring: run's end says the snapshot kept only the
    last events, and names a ring that keeps a run this long; run with it,
    nothing is overwritten and nothing said. A run that fits says nothing."""
    import re
    out = os.path.join(d, "x.vtsnap")
    p = run(["--conf", "max_events:1024", "-o", out, "--", prog])
    m = re.search(r"vramtrace run: \S+x\.vtsnap kept the last 1024 of (\d+) events \(the ring "
                  r"is full\): what the run made and freed before them is not in it, what it "
                  r"still held then is; VRAMTRACE_CONF=(ring:\d+MiB) keeps a run this long",
                  p.stderr)
    if p.returncode != 0 or not m or int(m.group(1)) <= 1024:
        fail("run must say the ring overflowed, and what keeps the run", p)
    _, text = summary(out)
    if "%s recorded, %d overwritten" % (m.group(1), int(m.group(1)) - 1024) not in text:
        fail("the counts said are not the snapshot's: " + text, p)
    p = run(["--conf", m.group(2), "-o", out, "--", prog])
    if p.returncode != 0 or "kept the last" in p.stderr:
        fail("the ring named must keep the whole run", p)
    if " 0 overwritten" not in summary(out)[1]:
        fail("the ring named overwrote events", p)


def case_two_recording_processes_get_one_file_each(d):
    out = os.path.join(d, "x.vtsnap")
    p = run(["-o", out, "--", "bash", "-c", "%s; %s" % (prog, prog)])
    if p.returncode != 0:
        fail("the programs failed", p)
    files = snapshots(d)
    pids = sorted(summary(os.path.join(d, f))[0] for f in files)
    want = sorted("x-%d.vtsnap" % q for q in pids)
    if files != want or len(files) != 2 or pids[0] == pids[1]:
        fail("two processes recorded: want x-PID.vtsnap each, got %s" % files, p)
    if sorted(os.path.basename(x[0]) for x in listed(p)) != files:
        fail("run must list both snapshots", p)
    if ("2 processes wrote exit snapshots for %s: each keeps its pid in its name" % out
            not in p.stderr):
        fail("run must say once why neither got the -o name", p)


def case_a_process_that_recorded_host_events_alone_leaves_the_name_to_the_devices(d):
    """A process that recorded host events alone (a DataLoader worker's CPU
    tensors under --track; here a mark) beside one that used the device: the
    device's gets the -o name, the other keeps its pid. Two host-only ones
    both keep theirs."""
    host = "%s -c 'import ctypes; ctypes.CDLL(None).vt_mark(b\"host only\")'" % sys.executable
    out = os.path.join(d, "x.vtsnap")
    p = run(["-o", out, "--", "bash", "-c", "%s; %s; %s" % (host, prog, host)])
    if p.returncode != 0:
        fail("the programs failed", p)
    files = snapshots(d)
    if len(files) != 3 or "x.vtsnap" not in files:
        fail("want x.vtsnap and two x-PID.vtsnap, got %s" % files, p)
    if "allocated" not in summary(out)[1]:
        fail("x.vtsnap must be the process that used the device", p)
    for f in files:
        pid, text = summary(os.path.join(d, f))
        if f != "x.vtsnap" and (f != "x-%d.vtsnap" % pid or "no device memory" not in text):
            fail("%s: a host-only process keeps its pid: %s" % (f, text), p)
    if sorted(x[0] for x in listed(p)) != sorted(os.path.join(d, f) for f in files):
        fail("run must list every snapshot under its final name", p)
    if "processes wrote exit snapshots" in p.stderr:
        fail("one process got the -o name: nothing to explain", p)
    for f in files:
        os.unlink(os.path.join(d, f))
    p = run(["-o", out, "--", "bash", "-c", "%s; %s" % (host, host)])
    files = snapshots(d)
    if p.returncode != 0 or len(files) != 2 or "x.vtsnap" in files:
        fail("two host-only processes: want x-PID.vtsnap each, got %s" % files, p)
    if "2 processes wrote exit snapshots" not in p.stderr:
        fail("run must say once why neither got the -o name", p)


def case_ranks_never_share_a_snapshot_file(d):
    """mpirun-style (one `vramtrace run` per rank, the same -o) and
    torchrun-style (one run, ranks as its children)."""
    out = os.path.join(d, "x.vtsnap")
    for r in ("0", "1"):
        var = "RANK" if r == "0" else "OMPI_COMM_WORLD_RANK"
        p = run(["-o", out, "--", prog], env=dict(base, **{var: r}))
        if p.returncode != 0:
            fail("rank %s failed" % r, p)
    if snapshots(d) != ["x-rank0.vtsnap", "x-rank1.vtsnap"]:
        fail("one file per rank expected, got %s" % snapshots(d))
    for f in snapshots(d):
        os.unlink(os.path.join(d, f))
    p = run(["-o", out, "--", "bash", "-c",
             "SLURM_PROCID=4 %s & LOCAL_RANK=5 %s; wait" % (prog, prog)])
    # each rank's name is its own: run gives each its plain name, no pid
    files = snapshots(d)
    if files != ["x-rank4.vtsnap", "x-rank5.vtsnap"]:
        fail("one file per rank expected, got %s" % files, p)


def case_run_forwards_a_snapshot_signal_to_the_program(d):
    p = start_hold(d, conf="signal:SIGUSR1")
    os.kill(p.pid, signal.SIGUSR1)          # to run, not to the program
    wait_for(lambda: any("-signal-" in f for f in snapshots(d)), "the signal snapshot")
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    sig = [f for f in snapshots(d) if "-signal-" in f]
    if len(sig) != 1 or not listed(r):
        fail("signal snapshots: %s" % snapshots(d), r)
    summary(os.path.join(d, sig[0]))



def case_a_signal_to_the_whole_job_is_one_snapshot(d):
    """A signal to the job's process group (`kill -USR1 -- -PGID`, Slurm's
    `scancel --signal`) reaches the program directly and again through run,
    which passes on what it is sent: one request, one snapshot; a second
    signal well after it is a request of its own."""
    env = dict(base, TMPDIR=d)
    p = subprocess.Popen([exe, "run", "--conf", "signal:SIGUSR1", "-o", os.path.join(d, "x.vtsnap"),
                          "--", misc, "hold"], env=env, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    if p.stdout.readline().strip() != "ready":
        p.kill()
        fail("the held program did not start: " + p.stderr.read())

    def signal_snaps():
        return [f for f in snapshots(d) if "-signal-" in f]
    for want in (1, 2):
        os.killpg(p.pid, signal.SIGUSR1)
        wait_for(lambda: len(signal_snaps()) >= want, "signal snapshot %d" % want)
        time.sleep(1.5)     # past the window in which a repeat is dropped, and more
        if len(signal_snaps()) != want:
            os.killpg(p.pid, signal.SIGKILL)
            fail("signal %d to the job: want %d signal snapshots, got %s"
                 % (want, want, signal_snaps()), finish(p))
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    if [k for _, k in listed(r) if k == "signal"] != ["signal"] * 2:
        fail("run must list the two signal snapshots", r)


# Inside the run: two held programs, then SIGUSR1 to the first of them from
# this process (a process of the run), then wait for SIGTERM, which ends both.
FELLOW_DRIVER = """
import os, signal, subprocess, sys, time
misc, go = sys.argv[1:3]
held = [subprocess.Popen([misc, "hold"], stdout=subprocess.PIPE, text=True) for _ in range(2)]
for h in held:
    assert h.stdout.readline().strip() == "ready"
def end(sig, frame):
    for h in held:
        h.terminate()
        h.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, end)
print(os.getpid(), held[0].pid, held[1].pid, flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
os.kill(held[0].pid, signal.SIGUSR1)
while True:
    signal.pause()
"""


def run_dir_of(d):
    """The run directory `vramtrace run` made under TMPDIR=d."""
    dirs = [f for f in os.listdir(d) if f.startswith("vramtrace-run-")]
    if len(dirs) != 1:
        fail("one run directory expected in %s: %s" % (d, os.listdir(d)))
    return os.path.join(d, dirs[0])


def signal_snapshots_by_pid(d):
    by_pid = {}
    for f in snapshots(d):
        if "-signal-" in f:
            by_pid.setdefault(summary(os.path.join(d, f))[0], []).append(f)
    return by_pid


def start_fellows(d):
    """FELLOW_DRIVER under `run --conf signal:SIGUSR1` in a session of its
    own (TMPDIR=d): (the run's process, the file that tells the driver to
    signal a, the driver's pid, a's, b's)."""
    go = os.path.join(d, "go")
    p = subprocess.Popen([exe, "run", "--conf", "signal:SIGUSR1", "-o", os.path.join(d, "x.vtsnap"),
                          "--", sys.executable, "-c", FELLOW_DRIVER, misc, go],
                         env=dict(base, TMPDIR=d), text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    line = p.stdout.readline().split()
    if len(line) != 3:
        p.kill()
        fail("the driver did not start: " + p.stderr.read())
    driver, a, b = (int(x) for x in line)
    return p, go, driver, a, b


def case_signal_from_outside_reaches_every_process_once_and_a_fellows_is_not_passed_on(d):
    """A process of the run signalled by a fellow process writes its snapshot
    and passes nothing on; a signal sent to run reaches its child from
    outside, which passes it on to every registered process: one snapshot
    each (none of its own: it recorded nothing). Registration: one line per
    process, pid and its start time."""
    p, go, driver, a, b = start_fellows(d)
    with open(os.path.join(run_dir_of(d), "signal")) as f:
        reg = [tuple(int(x) for x in ln.split()) for ln in f]
    for pid in (driver, a, b):
        with open("/proc/%d/stat" % pid) as f:
            start = int(f.read().rpartition(")")[2].split()[19])
        if (pid, start) not in reg:
            fail("%d (started at %d) is not registered: %s" % (pid, start, reg))
    open(go, "w").close()
    def counts():
        return {pid: len(v) for pid, v in signal_snapshots_by_pid(d).items()}

    def expect(want, what):
        wait_for(lambda: counts() == want, what)
        time.sleep(1.2)     # past the window in which a passed-on repeat is dropped
        if counts() != want:
            os.killpg(p.pid, signal.SIGKILL)
            fail("%s: want %s, got %s" % (what, want, signal_snapshots_by_pid(d)), finish(p))

    expect({a: 1}, "a signal from a fellow process is not passed on")
    os.kill(p.pid, signal.SIGUSR1)           # to run: from outside for its child
    # the driver recorded nothing: it passes the signal on and writes none
    expect({a: 2, b: 1}, "one signal to run: one snapshot per process")
    os.killpg(p.pid, signal.SIGUSR1)         # to the whole job: each passes it on
    expect({a: 3, b: 2}, "one signal to the process group: one snapshot per process")
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    kinds = [k for path, k in listed(r) if "-signal-" in path]
    if r.returncode != 0 or kinds != ["signal"] * 5:
        fail("run must list the five signal snapshots", r)
    if "vramtrace: signal %d passed on to 2 other processes of the run" % signal.SIGUSR1 \
            not in r.stderr:
        fail("the process that passed the signal on must say so", r)



def case_an_outside_signal_right_after_a_fellows_is_the_same_request(d):
    """A process that just took the snapshot a fellow asked for (its pass-on
    of a job-wide signal can arrive before the job's own signal does) takes
    the job's signal, arriving within the second, as the same request: no
    second snapshot, and nothing passed on again."""
    p, go, driver, a, b = start_fellows(d)
    open(go, "w").close()                    # the driver signals a: a fellow's request
    wait_for(lambda: a in signal_snapshots_by_pid(d), "a's snapshot for the fellow")
    os.kill(a, signal.SIGUSR1)               # from outside, within the second
    time.sleep(1.5)
    got = signal_snapshots_by_pid(d)
    if {pid: len(v) for pid, v in got.items()} != {a: 1}:
        os.killpg(p.pid, signal.SIGKILL)
        fail("want one snapshot, a's, got %s" % got, finish(p))
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    if "passed on" in r.stderr:
        fail("the repeat must not be passed on", r)


# Inside the run: a held program, then one that runs out of device memory.
OOM_DRIVER = """
import os, signal, subprocess, sys
misc = sys.argv[1]
held = subprocess.Popen([misc, "hold"], stdout=subprocess.PIPE, text=True)
assert held.stdout.readline().strip() == "ready"
oom = subprocess.run([misc, "oom"], stdout=subprocess.PIPE, text=True)
def end(sig, frame):
    held.terminate()
    held.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, end)
print(held.pid, oom.stdout.strip(), flush=True)
while True:
    signal.pause()
"""


def case_an_out_of_memory_in_one_process_dumps_every_process_of_the_run(d):
    """With a snapshot signal configured, the first OOM of a process of the
    run (its own OOM snapshot) sends that signal to the run's other
    processes: each dumps its memory of that moment."""
    env = dict(base, TMPDIR=d)
    p = subprocess.Popen([exe, "run", "--conf", "signal:SIGUSR1,dump_on_oom:1",
                          "-o", os.path.join(d, "x.vtsnap"),
                          "--", sys.executable, "-c", OOM_DRIVER, misc],
                         env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().split(maxsplit=1)
    if len(line) != 2 or line[1].strip() != "out of memory":
        p.kill()
        fail("the driver did not run out of memory: %s %s" % (line, p.stderr.read()))
    held = int(line[0])
    wait_for(lambda: held in signal_snapshots_by_pid(d), "the held program's signal snapshot")
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    kinds = sorted(k for path, k in listed(r))
    if "oom" not in kinds or kinds.count("signal") != 1:
        fail("one OOM snapshot and the other process's signal snapshot: %s" % kinds, r)
    # passed on to the held program and to the driver (which recorded nothing: no snapshot)
    if "out of memory: signal %d passed on to 2 other processes of the run" % signal.SIGUSR1 \
            not in r.stderr:
        fail("the process that ran out of memory must say it passed the signal on", r)


# Inside the run: a held program, and a Python child that registers and then
# execs `sleep` without the preload (same pid and start time, no handler).
EXEC_DRIVER = """
import os, subprocess, sys
held = subprocess.Popen([sys.argv[1], "hold"], stdout=subprocess.PIPE, text=True)
assert held.stdout.readline().strip() == "ready"
child = subprocess.Popen([sys.executable, "-c", sys.argv[2]], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(held.pid, child.pid, flush=True)
child.wait()
held.terminate()
held.wait()
print("child status", child.returncode, flush=True)
"""
EXEC_CHILD = """
import os, sys
print("registered", flush=True)
env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
os.execvpe("sleep", ["sleep", "60"], env)
"""


def case_a_registered_process_that_no_longer_catches_the_signal_is_spared(d):
    """A process that registered and then exec'd a program without vramtrace
    (same pid, same start time) would die of the signal: it is not sent."""
    env = dict(base, TMPDIR=d)
    p = subprocess.Popen([exe, "run", "--conf", "signal:SIGUSR1", "-o", os.path.join(d, "x.vtsnap"),
                          "--", sys.executable, "-c", EXEC_DRIVER, misc, EXEC_CHILD],
                         env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().split()
    if len(line) != 2:
        p.kill()
        fail("the driver did not start: " + p.stderr.read())
    held, execd = (int(x) for x in line)
    wait_for(lambda: open("/proc/%d/comm" % execd).read().strip() == "sleep", "the exec")
    with open(os.path.join(run_dir_of(d), "signal")) as f:
        if not any(int(ln.split()[0]) == execd for ln in f):
            fail("the process did not register before its exec")
    os.kill(held, signal.SIGUSR1)            # from outside: held passes it on
    wait_for(lambda: held in signal_snapshots_by_pid(d), "the held program's snapshot")
    time.sleep(0.3)
    alive = os.path.exists("/proc/%d" % execd) and \
        open("/proc/%d/stat" % execd).read().rpartition(")")[2].split()[0] != "Z"
    os.kill(execd, signal.SIGTERM)
    r = finish(p)
    if not alive or "child status -15" not in r.stdout:
        fail("the signal was passed on to a program that does not catch it", r)


def case_without_a_snapshot_signal_no_process_registers(d):
    p = subprocess.Popen([exe, "run", "-o", os.path.join(d, "x.vtsnap"), "--", misc, "hold"],
                         env=dict(base, TMPDIR=d), text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    if p.stdout.readline().strip() != "ready":
        p.kill()
        fail("the held program did not start: " + p.stderr.read())
    registered = os.path.exists(os.path.join(run_dir_of(d), "signal"))
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    if registered:
        fail("a process without signal: registered for it", r)
    if any(f.startswith("vramtrace-run-") for f in os.listdir(d)):
        fail("run left its run directory behind", r)


def case_sigterm_to_run_ends_the_program_with_its_exit_snapshot(d):
    p = start_hold(d)
    os.kill(p.pid, signal.SIGTERM)
    r = finish(p)
    if r.returncode != 128 + signal.SIGTERM or "signal 15" not in r.stderr:
        fail("run must exit 143 when the program died of SIGTERM", r)
    out = os.path.join(d, "x.vtsnap")
    if [x[0] for x in listed(r)] != [out]:
        fail("the exit snapshot must be written and listed", r)
    summary(out)


def case_hangup_to_run_reaches_the_program(d):
    """A signal whose default is to be ignored leaves both running; SIGHUP
    ends the program (after its exit snapshot) and run reports 128+1."""
    p = start_hold(d)
    os.kill(p.pid, signal.SIGWINCH)
    time.sleep(0.2)
    if p.poll() is not None:
        fail("SIGWINCH must not end the run")
    os.kill(p.pid, signal.SIGHUP)
    r = finish(p)
    if r.returncode != 128 + signal.SIGHUP or not listed(r):
        fail("SIGHUP must reach the program, which writes its exit snapshot", r)


def case_run_checks_the_output_path_before_starting(d):
    # A device of our own as root: should the check ever break, the
    # machine's /dev/null must not be what is lost.
    dev = "/dev/null"
    if os.geteuid() == 0:
        dev = os.path.join(d, "null")
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    cases = {
        os.path.join(d, "no-such-dir", "x.vtsnap"): "cannot write snapshots in",
        dev: "character device",
        d: "directory",
    }
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    cases[fifo] = "FIFO"
    link = os.path.join(d, "link.vtsnap")
    os.symlink(os.path.join(d, "target.vtsnap"), link)
    cases[link] = "symbolic link"
    for out, msg in cases.items():
        p = run(["-o", out, "--", "sh", "-c", "echo ran"])
        if p.returncode != 2 or msg not in p.stderr or "ran" in p.stdout:
            fail("-o %s must be refused before the program runs" % out, p)
        if len(p.stderr.strip().splitlines()) != 1:
            fail("one line expected", p)
    if not stat.S_ISCHR(os.lstat(dev).st_mode) or not stat.S_ISFIFO(os.stat(fifo).st_mode):
        fail("a special file was replaced")
    if os.path.exists(os.path.join(d, "target.vtsnap")):
        fail("the symbolic link was followed")


def case_lost_snapshot_makes_run_fail(d):
    sub = os.path.join(d, "sub")
    os.mkdir(sub)
    p = run(["-o", os.path.join(sub, "x.vtsnap"), "--", "bash", "-c",
             "rm -rf %s; %s" % (sub, prog)])
    if p.returncode == 0 or "LOST" not in p.stderr or "cannot create" not in p.stderr:
        fail("a snapshot that could not be written must fail the run", p)


def case_recording_process_that_execs_writes_its_snapshot_first(d):
    out = os.path.join(d, "x.vtsnap")
    p = run(["-o", out, "--", misc, "exec", "true"])
    if p.returncode != 0:
        fail("exec failed", p)
    files = snapshots(d)
    if len(files) != 1 or "-exec-1" not in files[0]:
        fail("the snapshot before exec is missing: %s" % files, p)
    pid, text = summary(os.path.join(d, files[0]))
    if "counts: allocs 1," not in text or "current 1 MiB" not in text:
        fail("the pre-exec snapshot lacks the allocation", subprocess.CompletedProcess(
            [], 0, text, ""))
    if [os.path.basename(x[0]) for x in listed(p)] != files:
        fail("run must list it", p)


def case_vfork_and_posix_spawn_children_write_nothing(d):
    """A vfork() child shares the recording parent's memory: the exec wrapper
    must do nothing there (nor for posix_spawn); the parent's exit snapshot
    is the run's only one."""
    out = os.path.join(d, "x.vtsnap")
    p = run(["-o", out, "--", misc, "vfork"])
    if p.returncode != 0 or "children ok" not in p.stdout:
        fail("the program's children failed", p)
    if snapshots(d) != ["x.vtsnap"] or [x[0] for x in listed(p)] != [out]:
        fail("only the parent's exit snapshot expected: %s" % snapshots(d), p)
    summary(out)


def case_python_keeps_its_signal_handlers_under_the_preload(d):
    """Python installs KeyboardInterrupt only where it finds SIGINT at SIG_DFL:
    vramtrace's termination handler must not hide that default."""
    code = ("import os, signal, time\n"
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
            "assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\n"
            "except KeyboardInterrupt:\n"
            "    print('caught')\n")
    p = run(["-o", os.path.join(d, "x.vtsnap"), "--", sys.executable, "-c", code])
    if p.returncode != 0 or p.stdout.strip() != "caught":
        fail("Python's own signal handling changed under the preload", p)


# The programs under test start with the termination signals at their
# default, whatever launched this test (nohup ignores SIGHUP, and vramtrace
# leaves an ignored signal ignored, by design); exec keeps SIG_DFL.
for _sig in (signal.SIGHUP, signal.SIGTERM):
    signal.signal(_sig, signal.SIG_DFL)

CASES = {k[len("case_"):]: v for k, v in globals().items() if k.startswith("case_")}
if case not in CASES:
    sys.exit("unknown case %s (known: %s)" % (case, " ".join(sorted(CASES))))
with tempfile.TemporaryDirectory() as tmp:
    CASES[case](tmp)
print("ok", case, arg or "")
