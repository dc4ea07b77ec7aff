"""A profile of the device training loop's steps alone, untracked or tracked
(bench_track.py's small loop on the simulated device, a mark per step when
tracked): where track()'s cost per step goes, without the import, the warm-up
and the exit in the samples. By hand, not a benchmark (no RESULT line):

    mkfifo /tmp/ctl /tmp/ack
    PERF_CTL=/tmp/ctl PERF_ACK=/tmp/ack perf record -D -1 \\
        --control=fifo:/tmp/ctl,/tmp/ack -F 1499 --call-graph dwarf,16384 -o tracked.data -- \\
        $VRAMTRACE_SIMRUN --mem 1G -- python tests/bench/perf_track_step.py tracked 2500
    perf script -i tracked.data --no-inline -F tid,ip,sym > tracked.txt

(`--no-inline` keeps perf script to seconds; the call chains need dwarf:
libpython and torch have no frame pointers). The loop tells perf when to
sample through the fifos (`enable` before the first step, `disable` after
the last); without PERF_CTL it only runs. Prints the process's CPU ms per
step (the mean: the ticks' and walks' steps included, as a profile sees them).

    python perf_track_step.py untracked|tracked STEPS [clean|leak]
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))


def perf_says(command: str) -> None:
    """``command`` to the perf control fifo, its answer awaited (none: no perf)."""
    ctl = os.environ.get("PERF_CTL")
    if not ctl:
        return
    with open(ctl, "w") as f:
        f.write(command + "\n")
    with open(os.environ["PERF_ACK"]) as f:
        f.read(5)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("untracked", "tracked"):
        sys.exit(__doc__.rsplit("\n\n", 1)[-1].strip())
    mode, steps = sys.argv[1], int(sys.argv[2])
    loop = sys.argv[3] if len(sys.argv) > 3 else "clean"
    import bench_track
    step = bench_track.warm_device_step(loop == "leak")
    import torch

    def run(mark=None) -> None:
        perf_says("enable")
        began = time.process_time()
        for i in range(steps):
            if mark is not None:
                mark(f"iteration {i}")
            step(i)
            torch.cuda.synchronize()
        took = time.process_time() - began
        perf_says("disable")
        print(f"{mode} {loop}: {took * 1e3 / steps:.3f} CPU ms per step")

    if mode == "tracked":
        import vramtrace.torch as vtt
        with vtt.track():
            run(vtt.mark)
    else:
        run()


if __name__ == "__main__":
    main()
