"""How the torch tests' drivers run the programs they drive (a PyTorch
process on the simulated device, the vramtrace command line): in this
process's environment plus what a case adds, the program's exit status and
its output, stdout and stderr merged in the order written."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Dict, List, Tuple


def run(cmd: List[str], env: Dict[str, str] | None = None,
        timeout: float = 600, cwd: Any = None) -> Tuple[int, str]:
    """`cmd` with `env` added to this process's environment (in `cwd`, where
    `vramtrace run` without -o writes its snapshot): its exit status and its
    merged output."""
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout


def pytorch_ipc_exit_crash(rc: int, out: str) -> bool:
    """Whether a process that shared CUDA tensors with others
    (torch.multiprocessing) died of PyTorch 2.14's own use of a destroyed
    singleton at exit (docs/limitations.md): SIGSEGV (a child of `vramtrace
    run` reports it, `run` passes on 139) right after the warning the same
    destructor prints first ("Producer process has been terminated before
    all shared CUDA tensors released"), the last line the program itself
    printed. Seen with and without vramtrace, untraced in a core."""
    if rc not in (-signal.SIGSEGV, 128 + signal.SIGSEGV):
        return False
    own = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("vramtrace run:")]
    return bool(own) and "Producer process has been terminated before all shared CUDA " \
        "tensors released" in own[-1]


def pytorch_ipc_child_exit_crash(exitcode: int, wrote_exit_snapshot: bool) -> bool:
    """Whether a child that sent CUDA tensors to its parent (a
    torch.multiprocessing producer, whose exit code the parent reports)
    died of the crash pytorch_ipc_exit_crash excuses: SIGSEGV after its exit
    handlers ran (`vramtrace run` wrote its exit snapshot). Seen once in a
    whole-suite run (the actor of actor_learner.py), without the warning
    pytorch_ipc_exit_crash looks for (the child printed nothing)."""
    return exitcode == -signal.SIGSEGV and wrote_exit_snapshot


def pytorch_exit_abort(rc: int, err: str) -> bool:
    """Whether a process died of PyTorch 2.14's own abort at exit after a CUDA
    backward (SIGABRT, "terminate called without an active exception" its
    last words on ``err``: the autograd engine's device thread drops its
    graph task's Python context while the interpreter finalizes;
    docs/limitations.md), seen with and without vramtrace on a loaded
    machine. Only an untraced baseline that printed all it had to may be
    excused (the caller checks that): a traced run must exit cleanly to
    write its snapshot."""
    return rc == -signal.SIGABRT and \
        err.rstrip().endswith("terminate called without an active exception")
