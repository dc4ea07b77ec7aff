"""The `vt_` prefix is what `include/` installs (docs/ARCHITECTURE.md,
"Names"): no C or C++ source outside `include/` uses a `vt_` name that the
installed headers do not declare; internal names are `vt__` or a folder's
prefix. Names in string literals and comments are not code (a file name, a
key printed by a test) and are left out."""

import os
import re
import sys

root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP = {".git", "build", "node_modules", "subprojects"}
NAME = re.compile(r"\bvt_[A-Za-z0-9]\w*")
# a string or character literal, a // or /* */ comment: blanked before looking
NOT_CODE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)


def sources(top: str):
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if x not in SKIP and not x.startswith((".", "build"))]
        for f in files:
            if f.endswith((".c", ".h", ".cpp", ".cc", ".cu", ".cuh")):
                yield os.path.join(d, f)


installed = set()
for path in sources(os.path.join(root, "include")):
    installed |= set(NAME.findall(NOT_CODE.sub(" ", open(path, encoding="utf-8").read())))
if len(installed) < 20:   # the public API is far larger: the scan itself is broken
    sys.exit(f"only {len(installed)} vt_ names found in include/: the scan is broken")
stray = []
for path in sorted(sources(root)):
    rel = os.path.relpath(path, root)
    if rel.startswith("include" + os.sep):
        continue
    code = NOT_CODE.sub(" ", open(path, encoding="utf-8", errors="replace").read())
    for name in sorted(set(NAME.findall(code)) - installed):
        stray.append(f"{rel}: {name}")
if stray:
    print("vt_ names outside include/ that it does not install (use vt__ or a "
          "folder prefix):\n  " + "\n  ".join(stray))
    sys.exit(1)
print(f"every vt_ name used outside include/ is one of the {len(installed)} it installs")
