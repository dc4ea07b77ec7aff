"""bench_replay_torch: how exactly `vramtrace replay` under PyTorch's rules
gives what real PyTorch reserves, setting by setting.

tests/torch/replay_prog.py (sizes across the 1 MiB and 10 MiB boundaries,
frees out of order, a side stream with record_stream, empty_cache, a cuBLAS
workspace) runs on the simulated 1 GiB device with a memory fraction of 0.7:
once recorded under `vramtrace run` with PyTorch's defaults (and its own
snapshot pickle dumped), then once per setting without vramtrace. Each
setting's real max_memory_reserved() is printed beside the replay of the
default run with that setting (bytes), and the pickle replayed as well.
Ends with a RESULT line: the largest relative difference and whether every
out-of-memory matched.

  simrun --mem 1G -- python tests/bench/bench_replay_torch.py
  (meson test -C build --benchmark bench_replay_torch -v)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "..", "torch", "replay_prog.py")
CLI = os.environ["VRAMTRACE_CLI"]
FRACTION = "0.7"
CASES = [   # (label, PYTORCH_CUDA_ALLOC_CONF, fraction)
    ("defaults", "", FRACTION),
    ("expandable_segments:True", "expandable_segments:True", FRACTION),
    ("max_split_size_mb:40", "max_split_size_mb:40", FRACTION),
    ("garbage_collection_threshold:0.6", "garbage_collection_threshold:0.6", FRACTION),
    ("roundup_power2_divisions:4", "roundup_power2_divisions:4", FRACTION),
    ("fraction 0.5 (the retry path)", "", "0.5"),
    ("fraction 0.4 (out of memory)", "", "0.4"),
]


def run(cmd: List[str], env: Optional[Dict[str, str]] = None) -> str:
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"bench_replay_torch: {' '.join(cmd)} failed:\n{p.stdout[-3000:]}")
    return p.stdout


def torch_run(conf: str, fraction: str, snap: str = "", pickle_path: str = ""
              ) -> Tuple[int, Optional[int]]:
    """replay_prog.py's max_memory_reserved() and the size it was refused (None)."""
    cmd = ([CLI, "run", "-o", snap, "--"] if snap else []) + \
        [sys.executable, PROG, "--fraction", fraction] + \
        (["--pickle", pickle_path] if pickle_path else [])
    out = run(cmd, {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {})
    refused = re.search(r"^oom_at \d+ (\d+)$", out, re.M)
    return int(re.search(r"^max_reserved (\d+)$", out, re.M).group(1)), \
        int(refused.group(1)) if refused else None


def replay(path: str, *args: str) -> Tuple[int, Optional[int]]:
    r = json.loads(run([CLI, "replay", path, "--json", "--rules", "pytorch", *args]))
    return r["devices"][0]["peak_reserved"], r["oom"]["size"] if r["oom"] else None


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        snap, pkl = os.path.join(tmp, "run.vtsnap"), os.path.join(tmp, "run.pickle")
        default_max, _ = torch_run("", FRACTION, snap, pkl)
        for label, conf, fraction in CASES:
            real = (default_max, None) if label == "defaults" else torch_run(conf, fraction)
            given = ",".join(x for x in (f"per_process_memory_fraction:{fraction}", conf) if x)
            rows.append((label, real, replay(snap, "--conf", given)))
        rows.append(("its own snapshot pickle, imported", (default_max, None), replay(pkl)))
    print("bench_replay_torch: replay_prog.py on the simulated 1 GiB device, "
          "max_memory_reserved() in bytes")
    print(f"{'setting':<36} {'real run':>13} {'replay':>13}  out of memory")
    worst, ooms_match = 0.0, True
    for label, (real, real_oom), (rep, rep_oom) in rows:
        worst = max(worst, abs(rep - real) / real)
        ooms_match &= real_oom == rep_oom
        oom = "-" if real_oom is None and rep_oom is None else f"{real_oom} / {rep_oom} B"
        print(f"{label:<36} {real:>13,} {rep:>13,}  {oom}")
    print("RESULT settings=%d max_rel_diff=%.4f ooms_match=%d" % (len(rows), worst, ooms_match))


if __name__ == "__main__":
    main()
