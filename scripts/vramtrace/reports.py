"""The command's reports, from Python: what ``vramtrace oom`` says about a
recording, as data or as text. They run the compiled ``vramtrace`` command
(:func:`vramtrace.__main__.cli_path`: ``$VRAMTRACE_CLI`` or the wheel's copy).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Dict, List, Optional

from ._lib import VramtraceError


def _cli(args: List[str]) -> "subprocess.CompletedProcess[str]":
    from .__main__ import cli_path
    exe = cli_path()
    if exe is None:
        raise VramtraceError("no vramtrace command to run (install the wheel, or set "
                             "VRAMTRACE_CLI to a built vramtrace)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=600)


def oom_report(path: "str | os.PathLike[str]", jobs: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """Why the recording at ``path`` (a .vtsnap or a PyTorch snapshot pickle)
    ran out of device memory and what would have fit: ``vramtrace oom --json``
    as a dict (schema: docs/json-schema.md). Its ``"fixes"`` are the
    candidates replayed; apply one only where ``"verified"`` is true. None
    when the recording holds no out-of-memory; raises VramtraceError when the
    file cannot be read."""
    args = ["oom", os.fspath(path), "--json"]
    if jobs:
        args += ["--jobs", str(int(jobs))]
    r = _cli(args)
    if r.returncode == 1:
        return None
    if r.returncode != 0:
        raise VramtraceError(r.stderr.strip() or f"vramtrace oom exited with {r.returncode}")
    return json.loads(r.stdout)


def oom_text(path: "str | os.PathLike[str]") -> Optional[str]:
    """The same explanation as text, about a screenful (``vramtrace oom``);
    None when the recording holds no out-of-memory."""
    r = _cli(["oom", os.fspath(path)])
    if r.returncode == 1:
        return None
    if r.returncode != 0:
        raise VramtraceError(r.stderr.strip() or f"vramtrace oom exited with {r.returncode}")
    return r.stdout
