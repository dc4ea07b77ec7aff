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


def _which(which: "int | str | None") -> List[str]:
    """``--oom`` for ``which``: an OOM's number (1 the first) or "last";
    [] for the default (the one the program ended with, else the first)."""
    if which is None:
        return []
    if which != "last" and (isinstance(which, bool) or not isinstance(which, int) or which < 1):
        raise ValueError(f"which: an OOM's number from 1, or 'last', not {which!r}")
    return ["--oom", str(which)]


def _run_oom(args: List[str]) -> Optional[str]:
    r = _cli(["oom", *args])
    if r.returncode == 1:
        return None
    if r.returncode != 0:
        raise VramtraceError(r.stderr.strip() or f"vramtrace oom exited with {r.returncode}")
    return r.stdout


def oom_report(path: "str | os.PathLike[str]", jobs: Optional[int] = None,
               which: "int | str | None" = None) -> Optional[Dict[str, Any]]:
    """Why the recording at ``path`` (a .vtsnap or a PyTorch snapshot pickle)
    ran out of device memory and what would have fit: ``vramtrace oom --json``
    as a dict (schema: docs/json-schema.md). Its ``"fixes"`` are the
    candidates replayed; apply one only where ``"verified"`` is true. Of
    several OOMs, the one the program ended with (the earlier ones caught),
    else the first; ``which`` picks another (1 the first, or "last"). None
    when the recording holds no out-of-memory; raises VramtraceError when the
    file cannot be read or holds fewer OOMs than ``which``."""
    args = [os.fspath(path), "--json", *_which(which)]
    if jobs:
        args += ["--jobs", str(int(jobs))]
    out = _run_oom(args)
    return None if out is None else json.loads(out)


def oom_text(path: "str | os.PathLike[str]", which: "int | str | None" = None) -> Optional[str]:
    """The same explanation as text, about a screenful (``vramtrace oom``);
    None when the recording holds no out-of-memory."""
    return _run_oom([os.fspath(path), *_which(which)])
