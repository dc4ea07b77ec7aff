#!/usr/bin/env python3
"""Write PyTorch snapshot pickles of many shapes into DIR for
test_import_stream.c, each pickled by Python's own pickle. Files named
`s-*.pickle` are shaped as the pickler shapes a snapshot: the streamed
import must take them as they are; `w-*.pickle` are shaped so that it
cannot (an entry the pickle reads again, a list that is not only entries,
trace lists shared or placed oddly) and the import must fall back to the
whole graph. Both must import exactly as the whole graph does.

usage: gen_import_pickles.py DIR
"""
import os
import pickle
import random
import sys

from torch_snapshot import Sim, dump, training_run

out = sys.argv[1]
rng = random.Random(11)


def write(name, obj, protocol=4):
    dump(obj, os.path.join(out, name + ".pickle"), protocol)


def random_sim(device, n):
    s = Sim(device=device, t0=1_700_000_000_000_000 + rng.randrange(50))
    live = []
    for i in range(n):
        r = rng.random()
        if live and r < 0.4:
            s.free(live.pop(rng.randrange(len(live))))
        elif r < 0.45:
            s.oom(rng.randrange(1, 1 << 30), rng.randrange(1 << 30))
        elif r < 0.5:
            s.annotate(f"phase {i}", rng.choice(("START", "END")))
        elif r < 0.52:
            s.empty_cache()
        else:
            meta = f"m{i}" if rng.random() < 0.2 else None
            live.append(s.alloc(rng.choice((1, 512, 700, 4096, 1 << 20, 3 << 20)),
                                rng.choice(("fwd", "bwd", "opt")), rng.randrange(1, 60), meta))
    return s


# Pickler-shaped: every protocol, one entry (APPEND), batches past 1000
# (several APPENDS), several devices whose times interleave, frames lists
# shared between entries (memo GETs), unknown actions, a root of one key.
for proto in (2, 3, 4, 5):
    write(f"s-training-p{proto}", training_run(steps=6).snapshot(), proto)
for k, n in enumerate((1, 2, 3, 999, 1000, 1001, 2500)):
    write(f"s-random-{k}", random_sim(0, n).snapshot(), rng.choice((2, 4, 5)))
for k in range(6):
    sims = [random_sim(d, rng.randrange(1, 1500)) for d in range(rng.randrange(2, 4))]
    snap = sims[0].snapshot()
    snap["segments"] = [g for s in sims for g in s.state()]
    snap["device_traces"] = [s.trace for s in sims]
    snap["external_annotations"] = [a for s in sims for a in s.annotations]
    write(f"s-devices-{k}", snap, rng.choice((2, 4, 5)))
s = random_sim(0, 1500)
shared = s.trace[3]["frames"]
for e in s.trace[::3]:
    e["frames"] = shared
s.trace.insert(5, {"action": "mystery", "addr": 1, "size": 2, "time_us": 3})
s.trace.insert(9, {"action": "alloc", "addr": 7, "size": 9, "time_us": 2, "frames": ()})
write("s-shared-frames", s.snapshot())
write("s-traces-only", {"device_traces": [random_sim(0, 300).trace]})
write("s-traces-first", dict(reversed(list(random_sim(0, 300).snapshot().items()))))
write("s-empty-device", {"segments": [], "device_traces": [[], random_sim(1, 50).trace, []]})

# Not streamable as they are: the import falls back to the whole graph.
s = random_sim(0, 400)
s.trace.append(s.trace[10])            # one entry dict twice: read again by a memo GET
write("w-entry-twice", s.snapshot())
s = random_sim(0, 400)
s.trace.insert(7, "not a dict")       # a list that is not only dicts
write("w-not-a-dict", s.snapshot())
t = random_sim(0, 300).trace
write("w-list-twice", {"segments": [], "device_traces": [t, t]})
snap = random_sim(0, 300).snapshot()
snap["other"] = {"device_traces": [[dict(e) for e in snap["device_traces"][0]]]}
snap["device_traces"] = []            # the entries streamed are no device's
write("w-not-the-traces", snap)

# Written by hand (no pickler does it): while an entry is built, a GET of the
# segments list made earlier and an APPEND of a new segment to it; the entry
# streamed would take that segment with it.
seg = (b"}(X\x07\x00\x00\x00addressJ\x00\x00\x10\x00X\x0a\x00\x00\x00total_size"
       b"J\x00\x00\x20\x00u")
entry = (b"}(X\x06\x00\x00\x00actionX\x05\x00\x00\x00allocX\x04\x00\x00\x00addrJ\x00\x00\x10\x00"
         b"X\x04\x00\x00\x00sizeM\x00\x02X\x07\x00\x00\x00time_usK\x05u")
with open(os.path.join(out, "w-old-list-filled.pickle"), "wb") as f:
    f.write(b"\x80\x02}q\x00(X\x08\x00\x00\x00segments]q\x01X\x0d\x00\x00\x00device_traces]q\x02"
            b"]q\x03(" + entry + b"h\x01" + seg + b"a0" + entry + b"ea" + b"u.")
