#!/usr/bin/env python3
"""Write the seed of the pickle fuzzer: a small PyTorch-shaped snapshot
(tests/interop/torch_snapshot.py), protocol 4, with an OOM."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import torch_snapshot as ts  # noqa: E402

sim = ts.training_run(steps=2)
sim.oom(1 << 30, 4096)
ts.dump(sim.snapshot(), sys.argv[1], 4)
