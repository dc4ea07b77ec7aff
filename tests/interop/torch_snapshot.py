"""Synthetic PyTorch memory snapshots, shaped exactly like the dict that
torch.cuda.memory._snapshot() returns in PyTorch 2.x (field names from
torch/csrc/cuda/memory_snapshot.cpp and torch/cuda/_memory_viz.py), with the
answers a faithful importer must find computed independently here.

The model is a small caching allocator: allocations are rounded up to 512
bytes (PyTorch's kMinBlockSize); requests up to 1 MiB are carved from 2 MiB
"small" segments, larger ones get a "large" segment of their size rounded up
to 2 MiB; a free is recorded as free_requested then free_completed, and the
bytes count as allocated until free_completed, as PyTorch's stats count them.
"""
import pickle

GRANULE = 512
SMALL_SEG = 2 << 20


def round_block(n):
    return GRANULE if n < GRANULE else (n + GRANULE - 1) // GRANULE * GRANULE


def frames(site, line):
    # innermost first, as PyTorch stores them
    return [
        {"filename": "train.py", "line": line, "name": site},
        {"filename": "train.py", "line": 10, "name": "step"},
        {"filename": "train.py", "line": 3, "name": "<module>"},
    ]


class Sim:
    def __init__(self, device=0, base=0x7F0000000000, t0=1_700_000_000_000_000):
        self.device = device
        self.next_addr = base
        self.t = t0
        self.trace = []
        self.segments = {}  # addr -> dict(size, small, blocks: {addr: (size, req, site, line)})
        self.live = {}  # addr -> (segaddr, size)
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.annotations = []

    def tick(self):
        self.t += 7
        return self.t

    def _entry(self, action, addr, size, fr=None, **extra):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": self.tick()}
        if fr is not None:
            e["frames"] = fr
        e.update(extra)
        self.trace.append(e)
        return e

    def _segment(self, size, small):
        addr = self.next_addr
        self.next_addr += size + (1 << 21)
        self.segments[addr] = {"size": size, "small": small, "blocks": {}, "used": 0}
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self._entry("segment_alloc", addr, size, frames("segment", 1))
        return addr

    def alloc(self, req, site="forward", line=20, user_metadata=None):
        size = round_block(req)
        small = req <= (1 << 20)
        seg = None
        if small:
            for a, g in self.segments.items():
                if g["small"] and g["used"] + size <= g["size"] and not g.get("freed"):
                    seg = a
                    break
            if seg is None:
                seg = self._segment(SMALL_SEG, True)
        else:
            seg = self._segment((size + SMALL_SEG - 1) // SMALL_SEG * SMALL_SEG, False)
        g = self.segments[seg]
        addr = seg + g["used"]
        g["used"] += size
        g["blocks"][addr] = (size, req, site, line)
        self.live[addr] = (seg, size)
        self.allocated += size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        extra = {"user_metadata": user_metadata} if user_metadata else {}
        self._entry("alloc", addr, req, frames(site, line), **extra)
        return addr

    def free(self, addr):
        seg, size = self.live.pop(addr)
        req = self.segments[seg]["blocks"][addr][1]
        self._entry("free_requested", addr, req, frames("free", 30))
        self._entry("free_completed", addr, req, frames("free", 30))
        del self.segments[seg]["blocks"][addr]
        self.allocated -= size

    def empty_cache(self):
        """Release every segment without live blocks (segment_free)."""
        for a, g in list(self.segments.items()):
            if not g["blocks"]:
                self._entry("segment_free", a, g["size"], frames("empty_cache", 40))
                self.reserved -= g["size"]
                del self.segments[a]

    def oom(self, req, device_free):
        self._entry("oom", device_free, req, frames("forward", 99), device_free=device_free)

    def annotate(self, name, stage):
        self.annotations.append({"name": name, "stage": stage, "device": self.device,
                                 "time_us": self.tick()})

    def state(self):
        segs = []
        for a in sorted(self.segments):
            g = self.segments[a]
            blocks, at, allocated, requested = [], a, 0, 0
            for b in sorted(g["blocks"]):
                size, req, site, line = g["blocks"][b]
                if b > at:
                    blocks.append({"address": at, "size": b - at, "requested_size": 0,
                                   "state": "inactive", "frames": []})
                blocks.append({"address": b, "size": size, "requested_size": req,
                               "state": "active_allocated", "frames": frames(site, line)})
                allocated += size
                requested += req
                at = b + size
            if at < a + g["size"]:
                blocks.append({"address": at, "size": a + g["size"] - at, "requested_size": 0,
                               "state": "inactive", "frames": []})
            segs.append({
                "device": self.device, "address": a, "total_size": g["size"],
                "allocated_size": allocated, "active_size": allocated,
                "requested_size": requested, "stream": 0,
                "segment_type": "small" if g["small"] else "large",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                "blocks": blocks,
            })
        return segs

    def snapshot(self):
        return {
            "segments": self.state(),
            "device_traces": [self.trace],
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                "garbage_collection_threshold": 0.0, "expandable_segments": False,
                "roundup_power2_divisions": {"1": 0}, "release_lock_on_cudamalloc": False,
            },
            "external_annotations": self.annotations,
        }

    def answers(self):
        alive = sorted((a, s) for a, (_, s) in self.live.items())
        return {"peak_allocated": self.peak_allocated, "peak_reserved": self.peak_reserved,
                "final_allocated": self.allocated, "final_reserved": self.reserved,
                "alive": alive}


def training_run(steps=5, leak_every=2, extra_hold=0, device=0):
    """A small training loop: weights kept, activations freed each step, one
    activation of every `leak_every`-th step leaked (site 'leaky_cache'),
    `extra_hold` more bytes held by site 'rank_imbalance'."""
    s = Sim(device=device)
    weights = [s.alloc(4 << 20, "init_weights", 5), s.alloc(3000, "init_bias", 6)]
    if extra_hold:
        s.alloc(extra_hold, "rank_imbalance", 77)
    for step in range(steps):
        s.annotate(f"step {step}", "START")
        acts = [s.alloc(1 << 20, "forward", 20), s.alloc(6 << 20, "forward_big", 21),
                s.alloc(700, "forward_small", 22, user_metadata=f"step={step}")]
        grads = [s.alloc(4 << 20, "backward", 25)]
        for a in acts[:2]:
            s.free(a)
        if step % leak_every == 0:
            pass  # acts[2] leaked
        else:
            s.free(acts[2])
        for g in grads:
            s.free(g)
        s.annotate(f"step {step}", "END")
    s.empty_cache()
    del weights
    return s


def dump(obj, path, protocol=4):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
