"""What the test_torch_observed_*.py drivers share: where the simulator,
the built `vramtrace` command and train_leak.py are, a run of train_leak.py
on the simulated device (under `vramtrace run` or alone), the figures
PyTorch printed, and a snapshot's JSON. It never imports torch."""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Tuple

from procs import pytorch_exit_abort, run

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
SCRIPT = os.path.join(HERE, "train_leak.py")
LOGITS_LINE = next(i for i, line in enumerate(open(SCRIPT), 1) if "# LOGITS_LINE" in line)


def train(kind: str, snap: str = "", *args: str, env: Dict[str, str] | None = None,
          run_args: Tuple[str, ...] = ()) -> str:
    """train_leak.py KIND ARGS on the device, under `vramtrace run -o SNAP`
    when SNAP is given; its output (stdout and stderr)."""
    cmd = [SIMRUN, "--mem", "1G", "--"]
    if snap:
        cmd += [CLI, "run", *run_args, "-o", snap, "--"]
    cmd += [sys.executable, SCRIPT, kind, *args]
    rc, out = run(cmd, env)
    if not snap and _pytorch_exit_abort(rc, out):
        return out   # the untraced baseline printed everything; PyTorch's teardown aborted
    assert rc == 0, out[-4000:]
    return out


def _pytorch_exit_abort(rc: int, out: str) -> bool:
    """The untraced baseline aborted at exit by PyTorch itself
    (procs.pytorch_exit_abort) after the program printed its last line."""
    lines = out.rstrip().splitlines()
    return pytorch_exit_abort(rc, out) and len(lines) >= 2 and lines[-2].startswith("max_reserved ")


def figures(out: str) -> List[str]:
    """The lines of PyTorch's own figures the script printed."""
    return [line for line in out.splitlines()
            if line.startswith(("step ", "max_allocated ", "max_reserved "))]


def snapshot_json(snap: str) -> dict:
    rc, out = run([CLI, "json", snap])
    assert rc == 0, out[-2000:]
    return json.loads(out)
