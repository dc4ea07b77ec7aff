#!/usr/bin/env python3
"""Write a PyTorch-shaped memory snapshot with N trace entries (default 1M)
for bench_import.sh: a training loop of alloc / free_requested /
free_completed entries over a few thousand distinct call sites, with
segment_alloc entries and the segments state at the end, pickled by Python's
own pickle (protocol 4, what torch writes on Python < 3.14).

usage: gen_big_pickle.py OUT.pickle [N]
"""
import pickle
import random
import sys

out = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
rng = random.Random(7)
files = [f"model/layer{i}.py" for i in range(40)]
names = [f"forward_{i}" for i in range(200)]
pool = [{"filename": rng.choice(files), "line": rng.randrange(1, 900), "name": rng.choice(names)}
        for _ in range(3000)]
outer = [{"filename": "train.py", "line": 42, "name": "step"},
         {"filename": "train.py", "line": 7, "name": "<module>"}]

trace = []
t = 1_700_000_000_000_000
base = 0x7F0000000000
seg_size = 64 << 20
segments = []
live = {}
cursor = seg_size  # forces a first segment
seg_addr = base - seg_size
while len(trace) < n:
    t += 3
    if live and (len(live) > 400 or rng.random() < 0.45):
        addr = rng.choice(list(live)) if len(live) < 50 else next(iter(live))
        size, fr = live.pop(addr)
        trace.append({"action": "free_requested", "addr": addr, "size": size, "stream": 0,
                      "time_us": t, "frames": fr})
        trace.append({"action": "free_completed", "addr": addr, "size": size, "stream": 0,
                      "time_us": t + 1, "frames": fr})
        continue
    size = rng.choice((512, 4096, 65536, 1 << 20, 3 << 20))
    if cursor + size > seg_size:
        seg_addr += seg_size
        cursor = 0
        segments.append(seg_addr)
        trace.append({"action": "segment_alloc", "addr": seg_addr, "size": seg_size, "stream": 0,
                      "time_us": t, "frames": []})
    addr = seg_addr + cursor
    cursor += size
    fr = [rng.choice(pool)] + outer
    live[addr] = (size, fr)
    trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t,
                  "frames": fr})
del trace[n:]

state = []
for a in segments:
    blocks, at = [], a
    for b in sorted(x for x in live if a <= x < a + seg_size):
        size, fr = live[b]
        if b > at:
            blocks.append({"address": at, "size": b - at, "requested_size": 0,
                           "state": "inactive", "frames": []})
        blocks.append({"address": b, "size": size, "requested_size": size,
                       "state": "active_allocated", "frames": fr})
        at = b + size
    if at < a + seg_size:
        blocks.append({"address": at, "size": a + seg_size - at, "requested_size": 0,
                       "state": "inactive", "frames": []})
    state.append({"device": 0, "address": a, "total_size": seg_size, "allocated_size": 0,
                  "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
                  "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                  "blocks": blocks})
with open(out, "wb") as f:
    pickle.dump({"segments": state, "device_traces": [trace], "allocator_settings": {},
                 "external_annotations": []}, f, protocol=4)
