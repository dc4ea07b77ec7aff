"""Every TEST(name) of the C suites is run: each name appears in a
meson.build's list (a test defined but not listed, or defined after
TEST_MAIN and not listed, compiles and never runs)."""

import glob
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
listed = set()
for mb in glob.glob(os.path.join(here, "**", "meson.build"), recursive=True):
    listed |= set(re.findall(r"'(\w+)'", open(mb, encoding="utf-8").read()))
missing = []
for c in sorted(glob.glob(os.path.join(here, "**", "*.c"), recursive=True)):
    for name in re.findall(r"^TEST\((\w+)\)", open(c, encoding="utf-8").read(), re.M):
        if name not in listed:
            missing.append(f"{os.path.relpath(c, here)}: {name}")
if missing:
    print("defined but in no meson.build list (never run):\n  " + "\n  ".join(missing))
    sys.exit(1)
print(f"every TEST() is listed ({len(listed)} names in the meson files)")
