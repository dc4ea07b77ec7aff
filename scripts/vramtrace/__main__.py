"""``python -m vramtrace ...`` and the ``vramtrace`` command of a pip install.

Both run the compiled ``vramtrace`` command line tool that the wheel carries
inside the package (``vramtrace/_bin/vramtrace``), replacing this Python
process, so that its exit status, signals and output are the tool's own.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional


def cli_path() -> Optional[str]:
    """The compiled command this package runs, or None when it has none.

    ``$VRAMTRACE_CLI`` when set; else the copy inside the package (a wheel
    install). A source checkout has none: build it with meson.
    """
    env = os.environ.get("VRAMTRACE_CLI")
    if env:
        return env
    inside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "vramtrace")
    return inside if os.access(inside, os.X_OK) else None


def main(argv: Optional[List[str]] = None) -> int:
    """Exec the compiled command with ``argv`` (default: this process's)."""
    args = sys.argv[1:] if argv is None else argv
    exe = cli_path()
    if exe is None:
        sys.stderr.write(
            "vramtrace: this copy of the package has no compiled command "
            "(vramtrace/_bin/vramtrace): install the wheel (pip install .) or set "
            "VRAMTRACE_CLI to a built vramtrace\n")
        return 2
    try:
        os.execv(exe, [exe] + list(args))
    except OSError as exc:
        sys.stderr.write(f"vramtrace: cannot run {exe}: {exc.strerror}\n")
        return 2
    return 0  # not reached: execv replaced the process


if __name__ == "__main__":
    sys.exit(main())
