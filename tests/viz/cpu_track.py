"""A CPU-only run under vramtrace.torch.track(), for the timeline's lane of
storages vramtrace did not allocate.

Run as ``python cpu_track.py OUT.vtsnap``: makes a few CPU tensors of known
sizes across two marked steps (one freed in its step, the others kept),
writes the snapshot and prints one JSON line: the storages it made (their
count and bytes) and the name the checker gives the largest.
"""

from __future__ import annotations

import json
import sys

import torch

import vramtrace
import vramtrace.torch as vtt


def main() -> None:
    out = sys.argv[1]
    made = []
    with vtt.track(walk=False):
        vtt.mark("load")
        table = torch.zeros(256, 1024)
        made.append(table)
        rows = [torch.ones(1024 * (k + 1)) for k in range(4)]
        made.extend(rows)
        vtt.mark("work")
        scratch = torch.empty(64, 1024)
        scratch.fill_(1.0)
        made.append(scratch)
        nbytes = [t.untyped_storage().nbytes() for t in made]
        del scratch, made
        vtt.mark("end")
        vramtrace.snapshot(out)
    with open(__file__) as f:
        line = next(i for i, text in enumerate(f, 1) if text.strip().startswith("table = "))
    print(json.dumps({"storages": len(nbytes), "bytes": nbytes,
                      "largest": f"table = torch.zeros(256, 1024) (cpu_track.py:{line}"}))


if __name__ == "__main__":
    main()
