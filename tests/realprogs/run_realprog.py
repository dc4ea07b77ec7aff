#!/usr/bin/env python3
"""Run one realprogs program plain on the simulated device and under
`vramtrace run`; the two runs must print the same bytes and exit with the
same status, and the snapshot's reports must show exactly what the program
declares it leaves allocated ("leak: KIND BYTES" lines).

usage: run_realprog.py VRAMTRACE_EXE SIM_LIBDIR PROG [--devices N] [--mem SIZE] [--status N]
                      [--fails-with CONF] [--traced-stderr-has TEXT]
                      [--traced-stderr-lacks TEXT] [--ipc-safe 0|1]

--fails-with CONF: under vramtrace with VRAMTRACE_CONF=CONF the program must
exit with another status and print other bytes (the checks can fail).
--traced-stderr-has / -lacks TEXT: what the run under vramtrace says on stderr.
--ipc-safe 0|1: what the snapshot's meta says of the IPC-safe mode.
"""
import json
import os
import subprocess
import sys
import tempfile

exe, simdir, prog = (os.path.abspath(a) for a in sys.argv[1:4])
opts = sys.argv[4:]
devices, mem, want_status = "1", "4G", 0
fails_with, stderr_has, stderr_lacks, ipc_safe = None, [], [], None
while opts:
    k, v = opts[0], opts[1]
    opts = opts[2:]
    if k == "--devices":
        devices = v
    elif k == "--mem":
        mem = v
    elif k == "--status":
        want_status = int(v)
    elif k == "--fails-with":
        fails_with = v
    elif k == "--traced-stderr-has":
        stderr_has.append(v)
    elif k == "--traced-stderr-lacks":
        stderr_lacks.append(v)
    elif k == "--ipc-safe":
        ipc_safe = v == "1"
    else:
        sys.exit("run_realprog.py: unknown option " + k)

env = {k: v for k, v in os.environ.items()
       if k not in ("LD_PRELOAD", "VRAMTRACE_CONF", "VRAMTRACE_OUT", "VRAMTRACE_LIB")}
env.update(LD_LIBRARY_PATH=simdir, SIMCUDA_MEM=mem, SIMCUDA_DEVICES=devices)
failures = []


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        print("  " + str(detail).replace("\n", "\n  "))
        failures.append(name)


def fmt_bytes(b):
    """vramtrace's byte format (trace/common/format_bytes.c): binary units,
    at most two decimals, trailing zeros dropped."""
    if b < 1024:
        return "%d B" % b
    v, u = float(b), 0
    while v >= 1024 and u < 6:
        v /= 1024
        u += 1
    num = ("%.2f" % v).rstrip("0").rstrip(".")
    return "%s %s" % (num, ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"][u])


def run(cmd, conf=None):
    e = dict(env, VRAMTRACE_CONF=conf) if conf else env
    return subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=50)


with tempfile.TemporaryDirectory(prefix="vt-realprog-") as tmp:
    snap = os.path.join(tmp, "run.vtsnap")
    plain = run([prog])
    if plain.returncode == 77 and want_status != 77:   # cannot run here (one GPU of two)
        print("SKIP:", plain.stdout.decode(errors="replace").strip())
        sys.exit(77)
    traced = run([exe, "run", "-o", snap, "--", prog])
    name = os.path.basename(prog)
    check(name + ": exit status %d plain" % want_status, plain.returncode == want_status,
          plain.stdout.decode(errors="replace") + plain.stderr.decode(errors="replace"))
    check(name + ": same exit status under vramtrace", traced.returncode == plain.returncode,
          "plain %d, traced %d\n%s" % (plain.returncode, traced.returncode,
                                       traced.stderr.decode(errors="replace")))
    check(name + ": same output under vramtrace", traced.stdout == plain.stdout,
          "plain:\n%s\ntraced:\n%s" % (plain.stdout.decode(errors="replace"),
                                       traced.stdout.decode(errors="replace")))
    traced_err = traced.stderr.decode(errors="replace")
    for text in stderr_has:
        check(name + ": vramtrace says %r" % text, text in traced_err, traced_err)
    for text in stderr_lacks:
        check(name + ": vramtrace does not say %r" % text, text not in traced_err, traced_err)
    if fails_with:
        bad = run([exe, "run", "-o", os.path.join(tmp, "bad.vtsnap"), "--", prog], conf=fails_with)
        check(name + ": with %s the program's own checks fail" % fails_with,
              bad.returncode != plain.returncode and bad.stdout != plain.stdout,
              "status %d\n%s" % (bad.returncode, bad.stdout.decode(errors="replace")))
    leaks = {}
    for line in plain.stdout.decode().splitlines():
        if line.startswith("leak: "):
            kind, n = line[6:].rsplit(" ", 1)
            leaks[kind] = leaks.get(kind, 0) + int(n)

    doc = json.loads(run([exe, "json", snap]).stdout)
    if ipc_safe is not None:
        check(name + ": the snapshot says ipc_safe %s" % ipc_safe,
              doc["meta"]["ipc_safe"] == ipc_safe, doc["meta"])
    alive = {}
    for l in doc["lifetimes"]:
        if "alive" in l["flags"] and "inherited" not in l["flags"]:
            alive["device"] = alive.get("device", 0) + l["size"]
    for u in doc.get("uncached", []):
        if u["alive"] and not u["inherited"]:
            alive[u["kind"]] = alive.get(u["kind"], 0) + u["size"]
    check(name + ": alive at exit, by kind, is what the program left", alive == leaks,
          "declared %s, snapshot %s" % (leaks, alive))

    text = run([exe, "leaks", snap]).stdout.decode()
    total = sum(leaks.values())
    if total:
        check(name + ": leaks total", "SUMMARY: vramtrace: %s alive in " % fmt_bytes(total) in text,
              text)
    else:
        check(name + ": leaks says none", "no allocations alive at the snapshot" in text, text)
    for kind, n in leaks.items():
        if kind == "device":
            continue
        check(name + ": leaks names %s" % kind, "(%s) in " % kind in text and
              "%s %s" % (kind, fmt_bytes(n)) in text, text)
    summary = run([exe, "summary", snap]).stdout.decode()
    for kind, n in leaks.items():
        if kind != "device":
            check(name + ": summary shows %s alive" % kind,
                  "  %s: " % kind in summary and ("alive %s in " % fmt_bytes(n)) in summary, summary)
    if "device" in leaks:
        check(name + ": summary's current allocated is the device leak",
              ", current %s\n" % fmt_bytes(leaks["device"]) in summary, summary)

sys.exit(1 if failures else 0)
