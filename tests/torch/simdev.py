"""The simulated device as a test sees it from Python: its counters
(tests/sim/simcuda.h, read through ctypes from the preloaded libcuda.so.1)
and which CUDA libraries this process has mapped."""

from __future__ import annotations

import ctypes
import os
import re
from typing import Dict, List

# simcuda_counters, field for field (all uint64_t, in order).
COUNTER_FIELDS = [
    "mem_alloc_calls", "mem_alloc_async_calls", "mem_alloc_managed_calls",
    "mem_alloc_host_calls", "mem_free_calls", "mem_free_async_calls",
    "mem_free_host_calls", "vmm_create_calls", "vmm_release_calls",
    "allocs", "allocs_device", "allocs_async", "allocs_managed", "frees",
    "failed_allocs", "bad_frees", "bytes_in_use", "peak_bytes",
    "event_records", "event_syncs", "event_queries", "stream_syncs",
    "stream_waits", "device_syncs", "streams_created", "events_created",
    "kernel_launches", "host_funcs", "memcpys", "memsets",
    "illegal_addresses", "stale_stream_uses",
]


class _Counters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in COUNTER_FIELDS]


def _driver() -> ctypes.CDLL:
    # Already loaded (simrun preloads it): dlopen returns that copy.
    return ctypes.CDLL("libcuda.so.1")


def counters(device: int = 0) -> Dict[str, int]:
    """The sim's counters for `device` (cumulative since process start)."""
    c = _Counters()
    if _driver().simcuda_stats(device, ctypes.byref(c)) != 0:
        raise RuntimeError("simcuda_stats failed: not on the simulated device?")
    return {name: int(getattr(c, name)) for name in COUNTER_FIELDS}


def capacity(device: int = 0) -> int:
    fn = _driver().simcuda_capacity
    fn.restype = ctypes.c_size_t
    return int(fn(device))


# The NVIDIA libraries that must never be real in a sim process: the
# runtime, the driver, cuBLAS/cuBLASLt, cuDNN (all of cuDNN's parts) and NVML.
_GUARDED = re.compile(
    r"/lib(cuda\.so|cudart\.so|cublas\.so|cublasLt\.so|cudnn[a-z_]*\.so|nvidia-ml\.so)[.\d]*$")


def mapped_cuda_libraries() -> Dict[str, str]:
    """{library file name: path} for every guarded library mapped now."""
    found: Dict[str, str] = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6:
                path = parts[5].strip()
                if _GUARDED.search(path):
                    found[os.path.basename(path)] = os.path.realpath(path)
    return found


def mapped_paths() -> List[str]:
    with open("/proc/self/maps") as maps:
        return sorted({line.split(None, 5)[5].strip() for line in maps
                       if len(line.split(None, 5)) == 6})
