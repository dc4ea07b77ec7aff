"""How the torch tests' drivers run the programs they drive (a PyTorch
process on the simulated device, the vramtrace command line): in this
process's environment plus what a case adds, the program's exit status and
its output, stdout and stderr merged in the order written."""

from __future__ import annotations

import os
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
