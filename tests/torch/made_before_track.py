"""A CUDA tensor made before the program's own ``vramtrace.torch.track()``
block and used inside it, then a snapshot from inside the block. Run under
`vramtrace run` (PyTorch's allocator observed): the tensor's memory was
handed out before track() began, by an op track() did not see, so it is
named by the line that first used it, not as memory no op made.

    made_before_track.py SNAPSHOT
"""

import sys

import torch
import vramtrace
import vramtrace.torch as vtt

x = torch.randn(256, 256, device="cuda")   # MADE_LINE
with vtt.track():
    y = x * 2   # USE_LINE
    vramtrace.snapshot(sys.argv[1])
print("done", tuple(y.shape))
