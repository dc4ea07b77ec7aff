#!/usr/bin/env python3
"""`vramtrace compare`: one snapshot per rank, side by side.

usage: test_compare.py VRAMTRACE_EXE RANK_PROG TEST_NAME

The ranks are plain processes of a program on the simulated device
(rank_prog.c) run under `vramtrace run` with RANK set; one rank holds 32 MiB
more from hold_extra_buffers_on_this_rank().
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import torch_snapshot as ts
from interop_script import run_named_test, vramtrace_runner

exe, prog, name = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
# removed when the script exits, failed or not (its assertions carry what
# the runs printed): a suite run leaves nothing in the temporary directory
_scratch = tempfile.TemporaryDirectory(prefix="vt-compare-")
tmp = _scratch.name
EXTRA = 32 << 20


vt = vramtrace_runner(exe)


def record(rank, imbalanced=1):
    # %r is the rank from the launcher's environment (without it, vramtrace
    # adds "-rankN" itself so that ranks never share a file)
    out = os.path.join(tmp, f"rank{rank}.vtsnap")
    env = dict(os.environ, RANK=str(rank), IMBALANCED_RANK=str(imbalanced))
    for k in ("LD_PRELOAD", "VRAMTRACE_CONF", "VRAMTRACE_OUT"):
        env.pop(k, None)
    pattern = os.path.join(tmp, "rank%r.vtsnap")
    p = subprocess.run([exe, "run", "-o", pattern, "--", prog], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 0 and f"rank {rank} done".encode() in p.stdout, p.stderr.decode()
    return out


def test_compare_names_the_rank_and_call_site_that_hold_more():
    files = [record(0), record(1)]
    out = vt("compare", *files).stdout.decode()
    lines = out.splitlines()
    assert "rank 0  " in lines[0] and any(l.startswith("rank 1  ") for l in lines), out
    spread = [l for l in lines if l.startswith("spread of peak allocated:")][0]
    assert spread.endswith("(rank 1), +32 MiB"), spread
    i = lines.index("call sites whose bytes at the peak differ most between ranks:")
    first = lines[i + 1]
    assert "+32 MiB" in first and "hold_extra_buffers_on_this_rank rank_prog.c:" in first, out
    assert "rank 0: 0 B, rank 1: 32 MiB" in first, first
    # when, as a date and time (UTC), not as seconds since 1970
    assert re.search(r"  allocated: peak 56 MiB at \d+\.\d{3} s "
                     r"\(20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC\), now ", out), out
    # the sites every rank shares differ by nothing and are not listed
    assert not any("alloc_weights" in l for l in lines[i + 1:]), out


def record_process(name, extra):
    """A process without RANK (a spawned trainer, a worker): its snapshot and
    its pid, as `run` says it; ``extra``: it holds 32 MiB more."""
    out = os.path.join(tmp, f"{name}.vtsnap")
    env = dict(os.environ, IMBALANCED_RANK="0" if extra else "1")
    for k in ("RANK", "LD_PRELOAD", "VRAMTRACE_CONF", "VRAMTRACE_OUT"):
        env.pop(k, None)
    p = subprocess.run([exe, "run", "-o", out, "--", prog], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    said = p.stdout.decode() + p.stderr.decode()
    pid = re.search(r"\(exit, pid (\d+)\)", said)
    assert p.returncode == 0 and pid, said
    return out, int(pid.group(1))


def test_compare_names_processes_without_a_rank_by_their_pid():
    """Snapshots of processes that are no ranks (hogwild's trainers, an
    actor and its learner) are named by their pids, not numbered as ranks
    by their place on the command line."""
    (a, pid_a), (b, pid_b) = record_process("trainer_a", False), record_process("trainer_b", True)
    out = vt("compare", a, b).stdout.decode()
    lines = out.splitlines()
    assert lines[0].startswith(f"pid {pid_a}  ") and f"pid {pid_b}  " in out, out
    assert "rank 0" not in out and "rank 1" not in out, out
    spread = [l for l in lines if l.startswith("spread of peak allocated:")][0]
    assert spread.endswith(f"(pid {pid_b}), +32 MiB"), spread
    assert f"pid {pid_a}: 0 B, pid {pid_b}: 32 MiB" in out, out
    j = json.loads(vt("compare", a, b, "--json").stdout)
    assert [x["label"] for x in j["ranks"]] == [f"pid {pid_a}", f"pid {pid_b}"], j["ranks"]


def test_compare_json_and_glob_over_three_ranks():
    for r in (0, 1, 2):
        record(r, imbalanced=2)
    j = json.loads(vt("compare", os.path.join(tmp, "rank*.vtsnap"), "--json").stdout)
    assert [x["rank"] for x in j["ranks"]] == [0, 1, 2]
    peaks = [x["peak_allocated"] for x in j["ranks"]]
    assert peaks[0] == peaks[1] and peaks[2] == peaks[0] + EXTRA, peaks
    sp = j["spread"]["peak_allocated"]
    assert sp["max_rank"] == 2 and sp["difference"] == EXTRA, sp
    top = j["sites"][0]
    assert top["site"].startswith("hold_extra_buffers_on_this_rank rank_prog.c:"), top
    assert top["bytes"] == {"0": 0, "1": 0, "2": EXTRA} and top["spread"] == EXTRA, top
    for x in j["ranks"]:
        assert x["peak_allocated_wall_ns"] > 1_600_000_000 * 10**9  # a real wall clock
    p = vt("compare", os.path.join(tmp, "nothing*.vtsnap"), check=False)
    assert p.returncode == 2 and p.stderr.decode().count("\n") == 1, p.stderr


def test_compare_of_pytorch_pickles_names_the_imbalanced_site():
    files = []
    for r, extra in ((0, 0), (1, 0), (2, 48 << 20), (3, 0)):
        f = os.path.join(tmp, f"r{r}.pickle")
        ts.dump(ts.training_run(extra_hold=extra).snapshot(), f)
        files.append(f)
    j = json.loads(vt("compare", "--json", *files).stdout)
    assert j["spread"]["peak_allocated"]["max_rank"] == 2
    assert j["sites"][0]["site"] == "rank_imbalance train.py:77"
    assert j["sites"][0]["bytes"]["2"] == 48 << 20


run_named_test(globals(), name)
