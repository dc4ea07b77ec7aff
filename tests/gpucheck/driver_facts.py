#!/usr/bin/env python3
"""Runs tests/gpucheck/driver_facts.c's facts plain and under the preload.

    driver_facts.py --exe EXE --lib LIBVRAMTRACE --libdir DIR [--record FILE] [--compare FILE]

DIR holds the libcudart.so.13 and libcuda.so.1 the facts run on (the
simulator's, or on a GPU the real ones). Every fact runs in its own process,
plain and with LIBVRAMTRACE preloaded; the preload must change no answer.
--record writes the plain answers (on a real GPU: driver_facts.real);
--compare checks the plain answers against a recorded file (in the suite:
the simulator against the real driver). Exit 0 when everything agrees, 1
otherwise, with each difference named.
"""
import argparse
import os
import subprocess
import sys
from typing import Dict, List, Tuple


def parse(line: str) -> Tuple[str, Dict[str, str]]:
    name, _, rest = line.partition(":")
    return name.strip(), dict(kv.split("=", 1) for kv in rest.split())


def run_fact(exe: str, name: str, env: Dict[str, str]) -> str:
    p = subprocess.run([exe, name], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if "cannot be preloaded" in p.stderr:   # ld.so goes on without it: a plain run
        sys.exit(f"driver_facts: {env.get('LD_PRELOAD')} was not preloaded: {p.stderr.strip()}")
    out = p.stdout.strip().splitlines()
    line = out[-1] if out else f"{name}:"
    if p.returncode != 0:
        line += f" exit={p.returncode}"
    return line


def read_recorded(path: str) -> Dict[str, Dict[str, str]]:
    facts = {}
    with open(path) as f:
        for ln in f:
            if ln.strip() and not ln.startswith("#"):
                name, kv = parse(ln)
                facts[name] = kv
    return facts


# Keys that are sizes of device memory, not answers: the cache serves the
# preloaded program's allocations from its own segments, so these differ
# under the preload by design.
SIZES = ("kib", "kept_kib", "first_kib")


def differences(what: str, want: Dict[str, str], got: Dict[str, str],
                sizes: bool = True, recorded: bool = False) -> List[str]:
    """`what`'s keys whose values differ. Against a recorded file
    (`recorded`), a key it lacks was added since the last real run: said,
    not counted."""
    keys = list(want) + [k for k in got if k not in want]
    if recorded:
        for k in keys:
            if k not in want and not k == "exit":
                print(f"UNRECORDED {what}: {k} (not seen on a GPU yet)")
        keys = [k for k in keys if k in want or k == "exit"]
    keys = [k for k in keys if sizes or not k.startswith(SIZES)]
    return [f"{what}: {k}={got.get(k, '(none)')}, expected {want.get(k, '(none)')}"
            for k in keys if want.get(k) != got.get(k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exe", required=True)
    ap.add_argument("--lib", required=True, help="libvramtrace to preload")
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--record", help="write the plain answers here")
    ap.add_argument("--compare", help="check the plain answers against this file")
    ap.add_argument("--header", default="", help="a comment line for --record")
    a = ap.parse_args()
    a.lib = os.path.abspath(a.lib)   # a bare name would be looked up on the library path
    if not os.path.isfile(a.lib):
        ap.error(f"--lib {a.lib}: no such file")

    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    base["LD_LIBRARY_PATH"] = os.pathsep.join(
        [a.libdir] + [p for p in base.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    names = subprocess.run([a.exe, "--list"], env=base, stdout=subprocess.PIPE, text=True,
                           check=True).stdout.split()
    recorded = read_recorded(a.compare) if a.compare else {}
    problems: List[str] = []
    plain_lines = []
    for name in names:
        plain = run_fact(a.exe, name, base)
        pre = run_fact(a.exe, name, dict(base, LD_PRELOAD=a.lib))
        plain_lines.append(plain)
        print(plain)
        _, pk = parse(plain)
        _, qk = parse(pre)
        problems += differences(f"{name} under the preload", pk, qk, sizes=False)
        if a.compare:
            if name not in recorded:   # added since the last real run: nothing to compare
                print(f"UNRECORDED {name}: not in {a.compare} (not seen on a GPU yet)")
            else:
                problems += differences(f"{name} here", recorded[name], pk, recorded=True)
    if a.record:
        with open(a.record, "w") as f:
            if a.header:
                f.write(f"# {a.header}\n")
            f.write("\n".join(plain_lines) + "\n")
    for p in problems:
        print("DIFFERS " + p)
    print(f"{len(names)} facts, {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
