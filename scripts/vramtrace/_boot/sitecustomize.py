"""vramtrace's bootstrap in a Python process under ``vramtrace run``.

``vramtrace run`` puts this folder first on PYTHONPATH, so Python imports
this file at start as its ``sitecustomize``. It leaves the process as it
would be without it, then starts ``vramtrace._autorun``:

- this folder leaves ``sys.path`` again;
- the program's own ``sitecustomize`` (one further along the path), if there
  is one, is imported in its place, with the error message Python's ``site``
  would print when it fails;
- the vramtrace package next to this folder is imported (the one that
  belongs to the preloaded library), without leaving its folder on
  ``sys.path``.

PYTHONPATH itself keeps the folder, so that Python processes the program
starts (DataLoader workers, torchrun ranks) are observed too.
"""

import os
import sys


def _bootstrap() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    package_parent = os.path.dirname(os.path.dirname(here))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]

    # The program's own sitecustomize, as site.execsitecustomize imports it.
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 - its import is what it does
    except ImportError as exc:
        if exc.name != "sitecustomize":
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{type(exc).__name__}: {exc}\n")
    except Exception as exc:  # noqa: BLE001 - site's own behaviour
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         f"{type(exc).__name__}: {exc}\n")
    if "sitecustomize" not in sys.modules and ours is not None:
        sys.modules["sitecustomize"] = ours

    try:
        if "vramtrace" not in sys.modules:
            sys.path.insert(0, package_parent)
            try:
                import vramtrace  # noqa: F401
            finally:
                try:
                    sys.path.remove(package_parent)
                except ValueError:
                    pass
        from vramtrace import _autorun
        _autorun.start()
    except Exception as exc:  # noqa: BLE001 - the program runs as without us
        sys.stderr.write(f"vramtrace: Python tracing not started ({type(exc).__name__}: "
                         f"{exc})\n")


_bootstrap()
del _bootstrap
