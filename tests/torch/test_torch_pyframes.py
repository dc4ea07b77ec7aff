"""Python frames in the stacks of a real PyTorch program, without track():
a leak at a known line of py_leak.py is grouped under that file:line by
`vramtrace leaks` and named by `summary`'s top call sites, whichever way the
program reached vramtrace; what the autograd engine thread kept is marked as
coming from a thread with no Python frames. This driver itself never imports torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]


def run(cmd, env=None):
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}:\n{p.stdout[-4000:]}"
    return p.stdout


@pytest.mark.parametrize("way", ["run", "pluggable"])
def test_leak_is_grouped_under_its_python_line(tmp_path, way):
    snap = str(tmp_path / f"{way}.vtsnap")
    cmd = [SIMRUN, "--mem", "1G", "--"]
    env = {}
    if way == "run":
        cmd += [CLI, "run", "-o", snap, "--"]
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    out = run(cmd + [sys.executable, os.path.join(HERE, "py_leak.py"), way, snap], env)
    leak = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    site = f"step {leak['file']}:{leak['line']}"

    leaks = run([CLI, "leaks", snap])
    groups = leaks.split("\n\n")
    mine = [g for g in groups if site in g]
    assert len(mine) == 1, leaks[-6000:]
    assert re.match(r"Leak of 9(\.0+)? MiB in 3 allocations from:", mine[0]), mine[0]
    # read outermost first: main's call of step, then step's line, then torch
    text = mine[0]
    assert text.index(site) < text.index(f"main {leak['file']}:"), text
    assert "_PyEval_EvalFrameDefault" not in text      # folded by default
    assert "_PyEval_EvalFrameDefault" in run([CLI, "leaks", "--all-frames", snap])

    summary = run([CLI, "summary", snap])
    sites = summary[summary.index("top call sites"):]
    assert re.search(r"9(\.0+)? MiB\s+3 allocations\s+" + re.escape(site), sites), sites

    # backward runs on PyTorch's autograd engine thread, which runs no Python
    # code: what it allocated and kept (cuBLAS's handle workspace for that
    # thread) is said to come from such a thread, in leaks and in summary
    nopy = [g for g in groups if "(from a thread running no Python code" in g]
    assert nopy and all(f"{leak['file']}:" not in g for g in nopy), leaks[-6000:]
    assert "[thread without Python frames]" in sites, sites
